"""Run the `navarch` CLI as a subprocess, the way an operator or a CI job does."""

from __future__ import annotations

import os
import subprocess
import sys
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
    child = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")} if inherit else {}
    child.update(env or {})
    return subprocess.run([sys.executable, "-m", "navarch", *args], cwd=cwd, env=child,
                          capture_output=True, text=True, timeout=timeout)
