"""Run the `navarch` CLI as a subprocess, the way an operator or a CI job does."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_navarch(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    inherit: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`python -m navarch ARGS` in cwd; returns the finished process (text output).

    env: variables for the child. With inherit (the default) they are added to this
    process's environment minus every NAVARCH_* variable; without it, env is the child's
    whole environment. Raises subprocess.TimeoutExpired after `timeout` seconds.
    """
    return subprocess.run(
        [sys.executable, "-m", "navarch", *args],
        cwd=cwd,
        env=_child_env(env, inherit),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "navarch", "apply", str(fleet), "--auto-approve"],
        cwd=cwd,
        env=_child_env(env, inherit),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
) -> list[subprocess.CompletedProcess[str]]:
    """Start `runs` `navarch apply FLEET --auto-approve` at the same moment (a barrier) and
    wait for all -> the finished processes.

    Fails the test unless the lease let them through one at a time: every run exits 0
    (it applied) or 4 (it found the lease held and says "locked"), and at least one
    applied. What the cloud ends with is the caller's to check.
    """
    start = threading.Barrier(runs)
    done: list[subprocess.CompletedProcess[str]] = []

    def one() -> None:
        start.wait()
        done.append(
            run_navarch(
                ["apply", str(fleet), "--auto-approve"],
                cwd=cwd,
                env=env,
                inherit=inherit,
                timeout=timeout,
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
