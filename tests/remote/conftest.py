"""A real OpenSSH sshd on 127.0.0.1 for the playbook runner tests.

The session fixture `sshd` starts `/usr/sbin/sshd -D -e -f CONFIG` unprivileged-port,
with its own generated host key, an authorized_keys file holding a generated client key,
StrictModes no and UsePAM no. The login user is root (the tests run as root in CI; sshd
needs root to switch to the login user anyway). Remote commands find the stand-ins
(tests/remote/standins: scontrol, kubectl, sudo, dcgmi, nvidia-smi) first on PATH through sshd_config
SetEnv, which also tells them where their state lives (NAVARCH_STANDIN_DIR) and the
reset_gpu playbook where the agent's state directory is (NAVARCH_AGENT_STATE_DIR).

The function fixture `standin` gives each test an empty world: calls recorded by the
stand-ins (one JSON line per call) and their state file.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.system import require_system_package

SSHD = Path("/usr/sbin/sshd")
STANDINS = Path(__file__).parent / "standins"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
    )
    return path.with_suffix(".pub").read_text().split()[1]


@dataclass(frozen=True)
class Sshd:
    port: int
    client_key: Path
    known_hosts: Path  # holds the server's real host key
    wrong_known_hosts: Path  # holds another key for the same [127.0.0.1]:port
    empty_known_hosts: Path
    state_dir: Path

    def ssh(self, **over: Any) -> dict[str, Any]:
        """A pool `ssh` mapping (fleet.schema.json $defs.ssh) that reaches this sshd;
        a key given as None is left out."""
        base = {
            "user": "root",
            "port": self.port,
            "key_file": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "head_node": "127.0.0.1",
            "connect_timeout": "10s",
            **over,
        }
        return {k: v for k, v in base.items() if v is not None}


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    require_system_package("openssh-server", SSHD)
    if os.geteuid() != 0:
        pytest.skip("the sshd fixture logs in as root and must run as root")
    base = tmp_path_factory.mktemp("sshd")
    host_key, client_key, other_key = base / "host_key", base / "client_key", base / "other_key"
    host_pub = _keygen(host_key)
    _keygen(client_key)
    other_pub = _keygen(other_key)
    (base / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    bin_dir = base / "bin"
    shutil.copytree(STANDINS, bin_dir)
    state_dir = base / "state"
    state_dir.mkdir()
    port = free_port()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} ssh-ed25519 {host_pub}\n")
    (base / "wrong_known_hosts").write_text(f"[127.0.0.1]:{port} ssh-ed25519 {other_pub}\n")
    (base / "empty_known_hosts").write_text("")
    config = base / "sshd_config"
    config.write_text(
        f"""\
ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
PidFile {base / "sshd.pid"}
AuthorizedKeysFile {base / "authorized_keys"}
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
MaxStartups 64
MaxSessions 64
LogLevel ERROR
SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin NAVARCH_STANDIN_DIR={state_dir} NAVARCH_AGENT_STATE_DIR={state_dir}/agent
"""
    )
    # sshd refuses to start without its privilege separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = open(base / "sshd.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=log)
    try:
        _wait_listening(port, proc, base / "sshd.log")
        yield Sshd(
            port=port,
            client_key=client_key,
            known_hosts=base / "known_hosts",
            wrong_known_hosts=base / "wrong_known_hosts",
            empty_known_hosts=base / "empty_known_hosts",
            state_dir=state_dir,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not listen on 127.0.0.1:{port}: {log.read_text()}")


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
