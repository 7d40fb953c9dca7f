"""A real OpenSSH sshd on 127.0.0.1, started in the foreground by a test fixture.

`start_sshd(base, set_env)` writes a config, generated host and client keys and an
authorized_keys file under `base`, starts `/usr/sbin/sshd -D -e -f CONFIG` on a free port
and yields an `Sshd` once it listens; it stops the daemon on exit. The login user is root
(sshd needs root to switch to the login user anyway). `set_env` becomes the sessions'
environment through sshd_config SetEnv: the tests/remote sshd puts the stand-ins first on
PATH there, the tests/slurm sshd gives the real Slurm client its SLURM_CONF.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.system import require_system_package

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
    )
    return path.with_suffix(".pub").read_text().split()[1]


@dataclass(frozen=True)
class Sshd:
    """A running sshd: its port, the client key it accepts and known_hosts files."""

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


def require_sshd() -> None:
    """Skip (fail in CI) without openssh-server; skip when not root (sshd logs in as root)."""
    require_system_package("openssh-server", SSHD)
    if os.geteuid() != 0:
        pytest.skip("the sshd fixture logs in as root and must run as root")


@contextmanager
def start_sshd(base: Path, set_env: Mapping[str, str], state_dir: Path) -> Iterator[Sshd]:
    """Run an sshd with its files under `base` and `set_env` as every session's
    environment (sshd_config SetEnv; values must hold no spaces). Yields once it listens;
    fails the test when it exits or does not listen within 10 s."""
    host_key, client_key, other_key = base / "host_key", base / "client_key", base / "other_key"
    host_pub = _keygen(host_key)
    _keygen(client_key)
    other_pub = _keygen(other_key)
    (base / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    port = free_port()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} ssh-ed25519 {host_pub}\n")
    (base / "wrong_known_hosts").write_text(f"[127.0.0.1]:{port} ssh-ed25519 {other_pub}\n")
    (base / "empty_known_hosts").write_text("")
    env = " ".join(f"{k}={v}" for k, v in set_env.items())
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
SetEnv {env}
"""
    )
    # sshd refuses to start without its privilege separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log_path = base / "sshd.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=log)
        try:
            _wait_listening(port, proc, log_path)
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
