"""The fleet secret: where fleet.yaml's `secret:` says it is, read by the run that needs it.

Every node's report signing key derives from it (navarch.report.signing), so it is read when a
run verifies reports or delivers a node its key, and never kept on the desired state
(FleetSpec holds only where it comes from: `{env: VAR}` or `{file: PATH}`). On a file://
store, where the reconciler and the local agents share one machine, the first apply
creates the file (ensure_local_secret); a cloud fleet's secret is provisioned by its
operator.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from navarch.errors import ConfigError
from navarch.fleet.spec import FleetSpec

__all__ = ["ensure_local_secret", "read_fleet_secret", "secret_path", "secret_problems"]


def secret_path(spec: FleetSpec) -> Path | None:
    """The secret file's path when the secret comes from a file, else None."""
    if "file" in spec.secret:
        path = Path(spec.secret["file"])
        return path if path.is_absolute() else spec.base_dir / path
    return None


def read_fleet_secret(spec: FleetSpec) -> bytes:
    """The fleet secret's bytes (surrounding whitespace stripped), from the environment
    variable or file fleet.yaml's `secret:` names.

    Raises ConfigError when the variable or file is missing or empty.
    """
    if "env" in spec.secret:
        value = os.environ.get(spec.secret["env"], "").strip()
        if not value:
            raise ConfigError(
                f"environment variable {spec.secret['env']} is empty or unset",
                file=str(spec.source),
                key_path="secret.env",
                hint="export the fleet secret, e.g. from your CI secret store",
            )
        return value.encode()
    path = secret_path(spec)
    assert path is not None
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the fleet secret file {path}: {exc.strerror}",
            file=str(spec.source),
            key_path="secret.file",
            hint="run `navarch apply` once on a file:// store to create it, or write one",
        ) from exc
    if not value:
        raise _empty_secret(spec, path)
    return value.encode()


def _empty_secret(spec: FleetSpec, path: Path, line: int | None = None) -> ConfigError:
    return ConfigError(
        f"fleet secret file {path} is empty: every node's report signing key derives from it",
        file=str(spec.source),
        line=line,
        key_path="secret.file",
        hint="write the fleet's secret into it (e.g. `openssl rand -hex 32`), or delete it "
        "and run `navarch apply` on a file:// store to create one",
    )


def secret_problems(spec: FleetSpec, line: int | None = None) -> list[ConfigError]:
    """What `navarch validate` can tell about the fleet secret without needing it: a
    secret file that exists but is empty or only whitespace (apply would stop on it; a
    missing file is created by apply on a file:// store, and an environment variable is
    often set only where apply runs). line: secret.file's line in the fleet file."""
    path = secret_path(spec)
    if path is None or not path.is_file():
        return []
    try:
        empty = not path.read_bytes().strip()
    except OSError:
        return []  # unreadable here (another user's file): the run that needs it says so
    return [_empty_secret(spec, path, line)] if empty else []


def ensure_local_secret(spec: FleetSpec) -> None:
    """Create the secret file (0600, 32 random bytes hex) if it is missing.

    Only for file:// stores, where the reconciler and the local agents share one
    machine; a cloud fleet's secret is provisioned by its operator.
    """
    path = secret_path(spec)
    if path is None or path.exists() or not spec.store_url.startswith("file://"):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
