"""A real OpenSSH sshd on 127.0.0.1 for the playbook runner tests, with stand-ins.

The session fixture `sshd` starts one sshd (tests/support/sshd.py). Remote commands find
the stand-ins (tests/remote/standins: scontrol, kubectl, sudo, dcgmi, nvidia-smi, navarch) first on
PATH through sshd_config SetEnv, which also tells them where their state lives
(NAVARCH_STANDIN_DIR) and the reset_gpu playbook where the agent's state directory is
(NAVARCH_AGENT_STATE_DIR) and the diagnostics playbook its `navarch` (NAVARCH_NODE_COMMAND,
the stand-in). The stand-ins cover what the real tools cannot be made to do on
demand (a hung command, a failing GPU reset, kubectl); tests/slurm runs the real Slurm.

The function fixture `standin` gives each test an empty world: calls recorded by the
stand-ins (one JSON line per call) and their state file.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sshd import Sshd, free_port, require_sshd, start_sshd

__all__ = ["Sshd", "Standin", "free_port"]

STANDINS = Path(__file__).parent / "standins"


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    require_sshd()
    base = tmp_path_factory.mktemp("sshd")
    bin_dir = base / "bin"
    shutil.copytree(STANDINS, bin_dir)
    state_dir = base / "state"
    state_dir.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "NAVARCH_STANDIN_DIR": str(state_dir),
        "NAVARCH_AGENT_STATE_DIR": f"{state_dir}/agent",
        # A login shell's PATH may hold another `navarch` (a pyenv shim) before bin_dir.
        "NAVARCH_NODE_COMMAND": f"{bin_dir}/navarch",
    }
    with start_sshd(base, env, state_dir) as server:
        yield server


class Standin:
    """The stand-ins' world: seed state, read the calls they recorded."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir

    def set_state(self, state: dict[str, Any]) -> None:
        (self.dir / "state.json").write_text(json.dumps(state))

    def state(self) -> dict[str, Any]:
        return json.loads((self.dir / "state.json").read_text())

    def calls(self, tool: str | None = None) -> list[list[str]]:
        path = self.dir / "calls.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [r["argv"] for r in rows if tool is None or r["tool"] == tool]

    def wait_for_calls(self, tool: str, count: int) -> list[list[str]]:
        """Calls of `tool` once there are at least `count` (for detached commands)."""
        for _ in range(400):
            calls = self.calls(tool)
            if len(calls) >= count:
                return calls
            time.sleep(0.05)
        raise AssertionError(f"{tool} was called {len(self.calls(tool))} times, wanted {count}")


@pytest.fixture
def standin(sshd: Sshd) -> Standin:
    for path in sshd.state_dir.iterdir():
        if path.is_dir():  # the agent state dir a GPU reset writes its marker to
            shutil.rmtree(path)
        else:
            path.unlink()
    # Stand-ins still running from an earlier test see a new generation and stop.
    (sshd.state_dir / "generation").write_text(uuid.uuid4().hex)
    return Standin(sshd.state_dir)
