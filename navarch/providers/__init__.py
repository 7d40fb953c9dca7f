"""Providers by type: local (embedded default), aws, gcp, lambda.

Each provider module exposes `create(name, config, *, base_dir, fleet) -> Provider`, where
config is the provider's mapping from fleet.yaml (already schema-checked and defaulted).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from navarch.errors import ConfigError
from navarch.providers.base import Provider, ProvisionRequest

__all__ = ["Provider", "ProvisionRequest", "open_provider"]

_MODULES = {
    "local": "navarch.providers.local",
    "aws": "navarch.providers.aws",
    "gcp": "navarch.providers.gcp",
    "lambda": "navarch.providers.lambda_cloud",
}


def open_provider(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> Provider:
    """Build the provider named `name` in fleet.yaml from its config mapping.

    Raises ConfigError for an unknown type (the schema already rejects those).
    """
    kind = config.get("type")
    module_name = _MODULES.get(str(kind))
    if module_name is None:
        raise ConfigError(f"unknown provider type {kind!r}", key_path=f"providers.{name}.type")
    module = importlib.import_module(module_name)
    return module.create(name, config, base_dir=base_dir, fleet=fleet)
