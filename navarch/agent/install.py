"""Install the agent's systemd units on this machine (`navarch agent install`).

The units' text comes from navarch.agent.bootstrap (templates/), shared with cloud-init.

"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from navarch.agent.bootstrap import render_units
from navarch.agent.config import AgentConfig

__all__ = ["install_units", "UNIT_DIR"]

UNIT_DIR = "etc/systemd/system"


def install_units(
    config_path: str,
    *,
    config: AgentConfig,
    root: str = "/",
    dry_run: bool = False,
    run: Callable[..., Any] = subprocess.run,
) -> list[str]:
    """Write the service + timer under ``root``/etc/systemd/system and enable the timer.

    The service runs this interpreter's agent (``sys.executable -m navarch.agent``, the
    same as ``navarch agent`` without loading the reconciler) with
    config_path. dry_run: write nothing, run nothing, return the rendered units as text.
    systemctl (``daemon-reload``, ``enable --now navarch-agent.timer``) runs only when
    root is "/" (with another root it would act on this host, not the image).
    Returns lines describing what was done. Raises OSError / CalledProcessError.
    """
    writable = [str(Path(config.state_file).parent)]
    if config.store.startswith("file://"):
        writable.append(config.store[len("file://") :])
    exec_start = " ".join(
        shlex.quote(a)
        for a in (
            sys.executable,
            "-m",
            "navarch.agent",
            "run",
            "--once",
            "--config",
            str(Path(config_path).resolve()),
        )
    )
    units = render_units(exec_start=exec_start, writable_paths=writable)
    unit_dir = Path(root) / UNIT_DIR
    if dry_run:
        return [f"# {unit_dir / name}\n{text}" for name, text in units.items()]
    unit_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for name, text in units.items():
        (unit_dir / name).write_text(text)
        done.append(f"wrote {unit_dir / name}")
    if Path(root).resolve() == Path("/"):
        run(["systemctl", "daemon-reload"], check=True)
        run(["systemctl", "enable", "--now", "navarch-agent.timer"], check=True)
        done.append("enabled navarch-agent.timer")
    return done
