"""``navarch agent watch``: one long-running agent that checks every interval, and at once
when the kernel log gains an XID or SXid line or a host signal that is fatal at once.

The timer's ``agent run --once`` every 30 s sees an XID within about 30 s; an operator who
prefers seconds runs this instead (a ``Type=simple`` service in place of the timer). Each
check is the same ``run_once`` (reports on change or heartbeat, the kernel log read from
the state's cursor); between checks the watcher only waits for new kernel output:

- ``kernel_log`` set (a text file): its size is polled every ``FILE_POLL_S``;
- otherwise ``/dev/kmsg`` is followed with poll(2) from its end (Linux
  Documentation/ABI/testing/dev-kmsg: SEEK_END skips to the newest record, a read returns
  one record); the journal, when it is the agent's source, carries the same records;
- the fake backend without a kernel log only waits for the interval.

A wake-up never reads for the check: ``run_once`` reads from its own cursor, so a line the
watcher saw and one it missed are treated alike.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from navarch.agent.config import AgentConfig

__all__ = ["watch", "kernel_waiter", "FILE_POLL_S", "WAKE_MARKERS"]

log = logging.getLogger("navarch.agent")

#: How often a text-file kernel log's size is polled while waiting.
FILE_POLL_S = 0.2
#: Bytes in a kernel record that wake the watcher (NVIDIA's "NVRM: Xid" and NVSwitch "SXid",
#: and the host signals that are fatal at once: navarch.agent.host_signals's latched rules).
WAKE_MARKERS = (
    b"Xid",
    b"hard LOCKUP",
    b"Remounting filesystem read-only",
    b"Shutting down filesystem",
    b"Uncorrected (",
    b"Uncorrectable (",
    b"[Hardware Error]",
    b"postRxDetLinkMask",
    b"Rx Detect Link mask",
    b"Device not ready; aborting reset",
    b"Removing after probe failure",
    b"Disabling device after reset failure",
)

#: waiter(timeout_s) -> True when a GPU line arrived within timeout_s, else False.
Waiter = Callable[[float], bool]


def _file_waiter(path: str) -> Waiter:
    def size() -> int:
        try:
            return os.stat(path).st_size
        except OSError:
            return 0

    seen = [size()]

    def wait(timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            now_size = size()
            if now_size != seen[0]:
                grew = now_size > seen[0]
                chunk = b""
                if grew:
                    with open(path, "rb") as fh:
                        fh.seek(seen[0])
                        chunk = fh.read(now_size - seen[0])
                seen[0] = now_size
                if not grew or any(m in chunk for m in WAKE_MARKERS):
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(FILE_POLL_S, left))

    return wait


def _kmsg_waiter(path: str = "/dev/kmsg") -> Waiter | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(fd, 0, os.SEEK_END)
    except OSError as exc:
        log.warning("kmsg_not_followed", extra={"fields": {"error": str(exc)}})
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def wait(timeout_s: float) -> bool:
        if not poller.poll(int(timeout_s * 1000)):
            return False
        woke = False
        while True:
            try:
                record = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we slept: read on
                    continue
                break  # EAGAIN: drained
            if not record:
                break
            woke = woke or any(m in record for m in WAKE_MARKERS)
        return woke

    return wait


def kernel_waiter(config: AgentConfig) -> Waiter | None:
    """The waiter for this config's kernel log (see the module docstring), or None when
    there is nothing to follow (fake backend without a kernel log, kmsg unreadable)."""
    from navarch.agent.gpu import fake_requested

    if config.kernel_log:
        return _file_waiter(config.kernel_log)
    if fake_requested(config.fake_gpu):
        return None
    return _kmsg_waiter()


def watch(
    load: Callable[[], AgentConfig],
    *,
    interval_s: float,
    stop: threading.Event,
    check: Callable[[AgentConfig], object] | None = None,
) -> None:
    """Check at once, then every ``interval_s`` seconds and whenever the kernel log gains
    a GPU line, until ``stop`` is set.

    load: returns the agent config (read again each check, so an edited agent.yaml
    applies); check: one check (default ``navarch.agent.runner.run_once``). A failing
    check (NavarchError, OSError) is logged and the watch goes on, like the timer's next
    run would.
    """
    from navarch.agent.runner import run_once
    from navarch.errors import NavarchError

    run = check or run_once
    config = load()
    waiter = kernel_waiter(config)
    while not stop.is_set():
        try:
            config = load()
            run(config)
        except (NavarchError, OSError) as exc:
            log.error(
                "report_not_written",
                extra={"fields": {"error": str(exc), "kind": type(exc).__name__}},
            )
        deadline = time.monotonic() + interval_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            step = min(left, 1.0)
            if waiter is None:
                stop.wait(step)
            elif waiter(step):
                log.info("kernel_log_woke", extra={"fields": {"node": config.node}})
                break
