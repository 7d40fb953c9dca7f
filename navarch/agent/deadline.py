"""Calls into a library that may never return (NVML, DCGM), each under a deadline the agent
can abandon.

A degrading GPU can stall the driver inside an NVML call: the call never returns and
cannot be interrupted from Python (ctypes releases the GIL and waits in the kernel). The
agent therefore makes every such call on one worker thread and waits for it at most the
call's deadline; a call that does not return in time raises ``CallHung`` in the caller,
and the worker is abandoned for the rest of the run (the library is now stuck behind its
own lock, so every later call would hang too): later calls raise ``CallHung`` at once.

The worker is a daemon thread started with ``threading.Thread`` (never a
``concurrent.futures`` pool, whose workers the interpreter joins at exit), so a call stuck
in the driver cannot keep the agent's process alive after its report is written.

Deadlines (docs/agent.md, "Deadlines"): ``call_timeout_s`` per call, and ``budget_s`` for
all calls of one run together; a call waits at most the smaller of its deadline and what
is left of the budget, so one run spends at most ``budget_s`` in the library whatever it
does. Source of the rule that a hung NVML call is a fault, not silence: NVSentinel's GPU
health monitor (killed by its watchdog 49 times in three days while NVML hung, the fault
never reported) and gpud (NVML calls under a context deadline).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CallHung",
    "DeadlineCaller",
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_BUDGET_S",
    "ProgramResult",
    "run_program",
    "run_tool",
]

#: One NVML call: a healthy call takes microseconds to a few hundred milliseconds
#: (nvmlInit with persistence mode off takes seconds); 10 s is far past any of them.
DEFAULT_CALL_TIMEOUT_S = 10.0
#: Every NVML call of one run together (about 40 calls per GPU); see docs/agent.md for how
#: it fits under the systemd unit's TimeoutStartSec.
DEFAULT_BUDGET_S = 45.0


class CallHung(Exception):
    """A call did not return within its deadline (or the worker was already abandoned).

    call: the library function's name; waited_s: how long this caller waited (0.0 when
    the worker was abandoned by an earlier call); abandoned_by: the call that hung first
    (None when this is that call).
    """

    def __init__(self, call: str, waited_s: float, abandoned_by: str | None = None) -> None:
        self.call = call
        self.waited_s = waited_s
        self.abandoned_by = abandoned_by
        if abandoned_by is not None:
            text = f"{call} not called: {abandoned_by} is still hung"
        elif waited_s <= 0:
            text = f"{call} not called: the run's time for library calls is spent"
        else:
            text = f"{call} did not return within {waited_s:.1f} s"
        super().__init__(text)


@dataclass
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    done: threading.Event
    result: Any = None
    error: BaseException | None = None


class DeadlineCaller:
    """Runs calls on one daemon worker thread, waiting for each at most its deadline.

    call_timeout_s: per call; budget_s: all calls of this caller together (seconds);
    clock: monotonic seconds (injectable). ``call(name, fn, *args)`` returns fn's result,
    re-raises its exception, or raises CallHung; ``close()`` ends the worker. Not for
    concurrent callers: one run, one caller, calls in order.
    """

    def __init__(
        self,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        budget_s: float = DEFAULT_BUDGET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call_timeout_s = call_timeout_s
        self.budget_s = budget_s
        self._clock = clock
        self._spent_s = 0.0
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self.hung: CallHung | None = None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:  # close(): the run is over
                return
            try:
                job.result = job.fn(*job.args)
            except BaseException as exc:  # noqa: BLE001 - handed back to the waiting caller
                job.error = exc
            job.done.set()

    def close(self) -> None:
        """End the worker once its queue is done (a hung worker never gets there): a
        long-running agent (``navarch agent watch``) makes one caller per run."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker = None

    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on the worker; raises CallHung past min(call_timeout_s, budget left)."""
        if self.hung is not None:
            raise CallHung(name, 0.0, abandoned_by=self.hung.call)
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="navarch-nvml", daemon=True)
            self._worker.start()
        wait_s = min(self.call_timeout_s, self.budget_s - self._spent_s)
        if wait_s <= 0:
            self.hung = CallHung(name, 0.0)
            raise self.hung
        job = _Job(fn, args, threading.Event())
        start = self._clock()
        self._jobs.put(job)
        returned = job.done.wait(wait_s)
        self._spent_s += max(0.0, self._clock() - start)
        if not returned:
            self.hung = CallHung(name, wait_s)
            raise self.hung
        if job.error is not None:
            raise job.error
        return job.result


@dataclass(frozen=True)
class ProgramResult:
    """What an external program left: exit code (-9 when killed for its deadline), its
    output so far, and whether it ran past its deadline."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


def run_program(argv: list[str], timeout_s: float) -> ProgramResult:
    """Run an external program (no shell, stdin /dev/null) for at most timeout_s seconds.

    Raises OSError (FileNotFoundError, PermissionError) when it cannot start. On a timeout
    the child is killed and waited for at most one more second, then abandoned: a program
    stuck in the driver (uninterruptible sleep: nvidia-smi, dcgmi on a hung GPU) cannot be
    reaped, and ``subprocess.run`` would wait for it forever after killing it.
    """
    import subprocess  # noqa: PLC0415 - only the real host runs programs

    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            out, err = _bytes(exc.stdout), _bytes(exc.stderr)
        return ProgramResult(-9, out or b"", err or b"", timed_out=True)
    return ProgramResult(proc.returncode, out, err)


def _bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else b""


def run_tool(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """``run_program`` as (exit code, stdout text). Raises OSError when the program cannot
    start and TimeoutError when it has not finished in time."""
    done = run_program(argv, timeout_s)
    if done.timed_out:
        raise TimeoutError(f"{argv[0]} did not finish within {timeout_s:g} s")
    return done.returncode, done.stdout.decode(errors="replace")
