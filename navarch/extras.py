"""Optional dependencies, installed by extras: ``pip install 'navarch[aws]'`` and so on.

    aws     boto3                          EC2 provider, s3:// store
    gcp     google-cloud-compute, -storage  Compute Engine provider, gs:// store
            google-cloud-pubsub             --on-events pubsub://, events setup
            google-cloud-logging            events setup: the log sink of GCE host events
    azure   azure-identity, -storage-blob, -mgmt-compute, -mgmt-network
            azure-storage-queue, -mgmt-eventgrid   --on-events azure-queue://, events setup
    lambda  (requests, already a core dependency)   Lambda Cloud provider
    ssh     fabric (paramiko, invoke)      playbooks over SSH (schedulers, drain checks)
    plots   matplotlib                     ``navarch simulate --html`` plots
    mcp     mcp (the official MCP SDK)     ``navarch mcp FLEET``: the fleet as an MCP server
    all     every one of them

``pip install navarch`` alone runs the whole loop on the embedded local provider and a
file:// store. A module that needs an extra is imported through ``import_extra``, so a
missing one fails with one line naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from navarch.errors import ConfigError

__all__ = ["MissingExtra", "import_extra", "EXTRA_PACKAGES"]

#: Top-level import names each extra provides (what a ModuleNotFoundError may name).
EXTRA_PACKAGES: dict[str, frozenset[str]] = {
    "aws": frozenset({"boto3", "botocore", "s3transfer"}),
    "gcp": frozenset({"google", "grpc", "proto"}),
    "azure": frozenset({"azure", "msal", "isodate"}),
    "lambda": frozenset(),
    "ssh": frozenset({"fabric", "paramiko", "invoke"}),
    "plots": frozenset({"matplotlib"}),
    "mcp": frozenset(
        {
            "mcp",
            "mcp_types",
            "pydantic",
            "pydantic_core",
            "anyio",
            "starlette",
            "sse_starlette",
            "uvicorn",
        }
    ),
}


class MissingExtra(ConfigError):
    """A feature's optional dependency is not installed. Attributes: extra, module."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        super().__init__(
            f"{what} needs navarch[{extra}] ({module} is not installed)",
            hint=f"pip install 'navarch[{extra}]'",
        )
        self.extra = extra
        self.module = module


def import_extra(module: str, extra: str, what: str) -> ModuleType:
    """importlib.import_module(module), where a missing dependency of extra raises
    MissingExtra naming it. what: the feature, for the message ("provider type aws").
    Other import errors propagate unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in EXTRA_PACKAGES[extra]:
            raise MissingExtra(what, extra, missing) from exc
        raise
