"""Run rendered cloud-init user-data in a scratch root, as a node would (not cloud-init).

cloud-init cannot run here, so this does its two jobs for navarch's user-data: write each
``write_files`` entry (content, mode) and run each ``runcmd`` entry (strings with ``sh
-c``, lists as argv), with NAVARCH_ROOT set to the scratch root. Absolute node paths in
the written files (/etc/navarch, /etc/systemd/system, /var/lib/navarch,
/usr/local/lib/navarch, /usr/local/bin) are moved under the root, and the agent's
``metadata`` is set to ``none``: the cloud's metadata service does not exist here (network
is 127.0.0.1 only).
The installed agent then runs with the service unit's own ExecStart and Environment,
rewritten the same way.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from navarch.agent.bootstrap import BundleSource

NODE_DIRS = (
    "/etc/navarch",
    "/etc/systemd/system",
    "/var/lib/navarch",
    "/usr/local/lib/navarch",
    "/usr/local/bin",
)
SERVICE = "/etc/systemd/system/navarch-agent.service"


def rooted(text: str, root: Path) -> str:
    """text with every node directory moved under root."""
    for d in NODE_DIRS:
        text = text.replace(d, f"{root}{d}")
    return text


def base_env(root: Path) -> dict[str, str]:
    """A node's bare environment: PATH (this Python first, as the image's python3), no
    credentials, no PYTHONPATH; the install script's scratch root, and no pause between
    its download attempts."""
    path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    return {
        "PATH": path,
        "HOME": str(root),
        "NAVARCH_ROOT": str(root),
        "NAVARCH_FETCH_PAUSE_S": "0",
        "LC_ALL": "C.UTF-8",
    }


def bundle_source(user_data: str) -> BundleSource:
    """The URL and sha256 the user-data's install script fetches and checks."""
    script = "\n".join(c for c in yaml.safe_load(user_data)["runcmd"] if isinstance(c, str))
    values = {}
    for line in script.splitlines():
        name, eq, rest = line.strip().partition("=")
        if eq and name in ("URL", "SHA256"):
            values[name] = shlex.split(rest)[0] if rest else ""
    return BundleSource(values["URL"], values["SHA256"])


@dataclass(frozen=True)
class Installed:
    """What the user-data left in the root, and how its service would start the agent."""

    root: Path
    files: tuple[str, ...]
    exec_start: tuple[str, ...]
    environment: dict[str, str]
    script: subprocess.CompletedProcess[str]


def run_user_data(user_data: str, root: Path) -> Installed:
    """Write the files and run the commands of user_data under root. Raises
    CalledProcessError (with the output) when a command fails."""
    doc = yaml.safe_load(user_data)
    assert user_data.startswith("#cloud-config\n")
    assert "packages" not in doc, "the bundle install needs no package"
    written = []
    for f in doc["write_files"]:
        target = Path(rooted(f["path"], root))
        target.parent.mkdir(parents=True, exist_ok=True)
        content = rooted(f["content"], root)
        if f["path"] == "/etc/navarch/agent.yaml":
            content = content.replace('metadata: "aws"', 'metadata: "none"')
            content = content.replace('metadata: "gcp"', 'metadata: "none"')
            content = content.replace('metadata: "azure"', 'metadata: "none"')
        target.write_text(content)
        target.chmod(int(f.get("permissions", "0644"), 8))
        written.append(f["path"])
    last = subprocess.CompletedProcess[str]([], 0, "", "")
    for cmd in doc["runcmd"]:
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else [rooted(str(a), root) for a in cmd]
        last = subprocess.run(
            argv, env=base_env(root), capture_output=True, text=True, timeout=120, check=False
        )
        if last.returncode != 0:
            raise subprocess.CalledProcessError(last.returncode, argv, last.stdout, last.stderr)
    service = (root / SERVICE.lstrip("/")).read_text()
    exec_start = next(
        line.split("=", 1)[1] for line in service.splitlines() if line.startswith("ExecStart=")
    )
    environment = dict(
        line.split("=", 2)[1:] for line in service.splitlines() if line.startswith("Environment=")
    )
    if str(root) not in service:  # units baked into the image, not written above
        exec_start = rooted(exec_start, root)
        environment = {k: rooted(v, root) for k, v in environment.items()}
    return Installed(root, tuple(written), tuple(shlex.split(exec_start)), environment, last)


def run_installed_agent(node: Installed, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Start the agent as the service would (its ExecStart), with env added to the node's
    bare environment (e.g. NAVARCH_FAKE_GPU, and credentials standing in for the role)."""
    return subprocess.run(
        list(node.exec_start),
        env={**base_env(node.root), **node.environment, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
