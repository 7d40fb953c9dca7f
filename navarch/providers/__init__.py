"""Providers by type: local (embedded default), aws, gcp, lambda, azure, then plugins.

Each provider module exposes `create(name, config, *, base_dir, fleet) -> Provider`, where
config is the provider's mapping from fleet.yaml (already schema-checked and defaulted).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from navarch.errors import ConfigError
from navarch.extras import import_extra
from navarch.plugins import Group, names
from navarch.providers.base import Provider, ProvisionRequest
from navarch.providers.plugin import open_plugin_provider

__all__ = ["BUILTIN_TYPES", "Provider", "ProvisionRequest", "open_provider"]

_MODULES = {
    "local": "navarch.providers.local",
    "aws": "navarch.providers.aws",
    "gcp": "navarch.providers.gcp",
    "lambda": "navarch.providers.lambda_cloud",
    "azure": "navarch.providers.azure",
}
#: Provider types navarch ships; any other type must be an installed plugin.
BUILTIN_TYPES = frozenset(_MODULES)


def open_provider(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> Provider:
    """Build the provider named `name` in fleet.yaml from its config mapping.

    Types other than the built-ins come from the navarch.providers entry-point group
    (navarch.providers.plugin). Raises ConfigError for an unknown type, PluginError for a plugin
    that fails to load or builds the wrong shape.
    """
    kind = config.get("type")
    module_name = _MODULES.get(str(kind))
    if module_name is None:
        # Built-ins first; then plugins of the navarch.providers entry-point group.
        plugin = open_plugin_provider(name, config, base_dir=base_dir, fleet=fleet)
        if plugin is not None:
            return plugin
        raise ConfigError(
            f"unknown provider type {kind!r}",
            key_path=f"providers.{name}.type",
            hint=f"use one of {sorted(_MODULES)} or install a plugin of the {Group.PROVIDERS} "
            f"entry-point group (installed: {names(Group.PROVIDERS) or 'none'})",
        )
    extra = "" if kind == "local" else str(kind)
    module = (
        importlib.import_module(module_name)
        if not extra
        else import_extra(module_name, extra, f"provider type {kind}")
    )
    provider: Provider = module.create(name, config, base_dir=base_dir, fleet=fleet)
    return provider
