"""Run the `navarch` CLI the way an operator or a CI job does: in this process (the
parser and `navarch.cli.main` with captured output, the default) or, where a test needs a
real process (signals, SIGKILL, concurrent runs, a PYTHONPATH of its own, the
`python -m navarch` entry point), as a subprocess."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess as _subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


def run_navarch(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    inherit: bool = True,
    timeout: float = 120,
    subprocess: bool = False,
) -> _subprocess.CompletedProcess[str]:
    """`navarch ARGS` in cwd; returns the finished run (exit code, text output).

    env: variables for the run. With inherit (the default) they are added to this
    process's environment minus every NAVARCH_* variable; without it, env is the run's
    whole environment. In process (the default) the run sees exactly that environment and
    cwd for the call (both restored after); with subprocess=True it is
    `python -m navarch ARGS`, which raises subprocess.TimeoutExpired after `timeout`
    seconds (an in-process run has no timeout).
    """
    child_env = _child_env(env, inherit)
    if not subprocess:
        code, out, err = in_process(args, cwd=cwd, env=child_env)
        return _subprocess.CompletedProcess(["navarch", *args], code, out, err)
    return _subprocess.run(
        [sys.executable, "-m", "navarch", *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def in_process(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], input: str = ""
) -> tuple[int, str, str]:
    """`navarch.cli.main(args)` in this process as a child would run it -> (exit code,
    stdout, stderr).

    For the call, os.environ is exactly env, the working directory is cwd, stdin reads
    `input`, and stdout and stderr are captured; all are restored afterwards, with the
    logging configuration main() sets up. SystemExit (argparse's usage errors) gives its
    code; an unexpected exception is printed as a traceback on stderr with code 1, as the
    interpreter does. The collector tuning main() does is undone by tests/conftest.py.
    """
    from navarch.cli import main

    # argcomplete answers a shell's completion request and ends its process with os._exit.
    assert "_ARGCOMPLETE" not in env, "a completion request needs a process: subprocess=True"
    out, err = io.StringIO(), io.StringIO()
    with _process_state_restored():
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(input), out, err
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = _exit_code(exc, err)
        except Exception:
            traceback.print_exc(file=err)
            code = 1
    return code, out.getvalue(), err.getvalue()


def _exit_code(exc: SystemExit, err: io.StringIO) -> int:
    """The exit status the interpreter gives for SystemExit(exc.code)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)
    return 1


@contextlib.contextmanager
def _process_state_restored() -> Iterator[None]:
    """Restore what a CLI run changes in its process: the environment, the working
    directory, the standard streams, navarch's loggers (handlers, levels, propagation)."""
    environ = dict(os.environ)
    cwd = os.getcwd()
    streams = sys.stdin, sys.stdout, sys.stderr
    loggers = _navarch_loggers()
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        for logger, (handlers, level, propagate, disabled) in loggers.items():
            logger.handlers[:] = handlers
            if logger.level != level:  # setLevel clears every logger's cache
                logger.setLevel(level)
            logger.propagate = propagate
            logger.disabled = disabled


def _navarch_loggers() -> dict[logging.Logger, tuple[list[logging.Handler], int, bool, bool]]:
    """navarch's loggers (those made so far, and the ones main() configures by name)."""
    names = {"navarch", "navarch.agent", "navarch.cli", "navarch.run"}
    names |= {n for n in logging.Logger.manager.loggerDict if n.startswith("navarch")}
    out = {}
    for name in names:
        log = logging.getLogger(name)
        out[log] = (list(log.handlers), log.level, log.propagate, log.disabled)
    return out


def kill_apply_mid_launch(
    fleet: Path,
    *,
    cwd: Path,
    reached: threading.Event,
    env: Mapping[str, str] | None = None,
    inherit: bool = True,
    timeout_s: float = 120,
) -> None:
    """Start `navarch apply FLEET --auto-approve`, wait until the fake cloud sets `reached`
    (it is holding a launch), then SIGKILL the run: a reconciler dying between launch and
    state write. Fails the test if the run never gets there within timeout_s."""
    proc = _subprocess.Popen(
        [sys.executable, "-m", "navarch", "apply", str(fleet), "--auto-approve"],
        cwd=cwd,
        env=_child_env(env, inherit),
        stdout=_subprocess.DEVNULL,
        stderr=_subprocess.DEVNULL,
    )
    try:
        assert reached.wait(timeout_s), "apply never reached the held launch"
    finally:
        proc.kill()
        proc.wait()


def concurrent_applies(
    fleet: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    inherit: bool = False,
    runs: int = 8,
    timeout: float = 180,
) -> list[_subprocess.CompletedProcess[str]]:
    """Start `runs` `navarch apply FLEET --auto-approve` at the same moment (a barrier) and
    wait for all -> the finished processes.

    Fails the test unless the lease let them through one at a time: every run exits 0
    (it applied) or 4 (it found the lease held and says "locked"), and at least one
    applied. What the cloud ends with is the caller's to check.
    """
    start = threading.Barrier(runs)
    done: list[_subprocess.CompletedProcess[str]] = []

    def one() -> None:
        start.wait()
        done.append(
            run_navarch(
                ["apply", str(fleet), "--auto-approve"],
                cwd=cwd,
                env=env,
                inherit=inherit,
                timeout=timeout,
                subprocess=True,
            )
        )

    threads = [threading.Thread(target=one) for _ in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outputs = [r.stdout + r.stderr for r in done]
    codes = [r.returncode for r in done]
    assert len(done) == runs and set(codes) <= {0, 4}, outputs
    assert codes.count(0) >= 1, outputs
    assert all("locked" in r.stdout + r.stderr for r in done if r.returncode == 4), outputs
    return done


def _child_env(env: Mapping[str, str] | None, inherit: bool) -> dict[str, str]:
    child = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")} if inherit else {}
    child.update(env or {})
    return child
