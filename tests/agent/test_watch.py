"""`navarch agent watch`: a check at once when the kernel log gains an XID line, without
waiting for the interval."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from navarch.agent import AgentConfig
from navarch.agent.runner import run_once
from navarch.agent.watch import kernel_waiter, watch
from navarch.stores import open_store

XID79 = (
    "[  100.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def _stored(cfg: AgentConfig) -> dict | None:
    try:
        return json.loads(open_store(cfg.store).get(cfg.report_key).data)
    except Exception:  # not written yet
        return None


def _until(predicate: Callable[[], bool], limit_s: float = 30.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_an_xid_line_triggers_a_check_before_the_interval(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config()
    open(cfg.kernel_log, "w").close()  # type: ignore[arg-type]
    checks: list[str] = []

    def check(config: AgentConfig) -> object:
        report = run_once(config)
        checks.append(report["status"])
        return report

    stop = threading.Event()
    # An hour between checks: only the kernel line can cause the second one.
    thread = threading.Thread(
        target=watch, args=(lambda: cfg,), kwargs={"interval_s": 3600, "stop": stop, "check": check}
    )
    thread.start()
    try:
        assert _until(lambda: checks == ["healthy"])
        with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
            fh.write(XID79)
        assert _until(lambda: (_stored(cfg) or {}).get("status") == "unhealthy")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert checks == ["healthy", "unhealthy"]
    assert not thread.is_alive()


def test_lines_without_an_xid_do_not_wake_the_watch(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config()
    open(cfg.kernel_log, "w").close()  # type: ignore[arg-type]
    waiter = kernel_waiter(cfg)
    assert waiter is not None
    with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
        fh.write("[  5.0] usb 1-1: new high-speed USB device\n")
    assert waiter(0.5) is False
    with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
        fh.write(XID79)
    assert waiter(0.5) is True


def test_a_fatal_host_line_wakes_the_watch(make_config: Callable[..., AgentConfig]) -> None:
    cfg = make_config()
    open(cfg.kernel_log, "w").close()  # type: ignore[arg-type]
    waiter = kernel_waiter(cfg)
    assert waiter is not None
    with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
        # public GCE report (tests/fixtures/host_signals/README.md, line 11)
        fh.write("[28599.037759] EXT4-fs (sdb): Remounting filesystem read-only\n")
    assert waiter(0.5) is True
