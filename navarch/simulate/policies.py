"""Policies a scenario runs under: the scenario's `pool:` overrides of the fleet file, and
the four policies `navarch simulate --compare` (no second scenario) sets side by side.

An override changes every pool of the fleet file before it is loaded, so the loader
validates the result as it validates any fleet.yaml (docs/simulate.md, "Scenario format").
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import FleetSpec
from navarch.fleet.text import read_fleet_text
from navarch.simulate.scenario import Scenario

log = logging.getLogger(__name__)

#: --compare's policies: (name, the scenario's `pool:` overrides), in the table's order.
#: default: the fleet as written; spares: two warm spares per pool; replace-only: no
#: in-place rung; reboot-first-without-surge: the ladder rebooting first with a surge only
#: for a node it will replace (the defaults before `surge_on: any`).
COMPARE_POLICIES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("default", {}),
    ("spares", {"spares": 2}),
    ("replace-only", {"remediation": ["replace"]}),
    ("reboot-first-without-surge", {"remediation": ["reboot", "replace"], "surge_on": "replace"}),
)


def compare_scenarios(scenario: Scenario) -> list[Scenario]:
    """The scenario under each of COMPARE_POLICIES (named `<name>/<policy>`), its own
    `pool:` overrides kept where a policy does not set the same key."""
    return [
        replace(
            scenario,
            name=f"{scenario.name}/{policy}",
            pool_overrides={**scenario.pool_overrides, **overrides},
        )
        for policy, overrides in COMPARE_POLICIES
    ]


def fleet_with_overrides(path: Path, overrides: Mapping[str, Any], origin: str) -> FleetSpec:
    """The fleet file at `path` with `overrides` ({"spares", "remediation", "surge_on",
    "acceptance"}) set on every pool, loaded and validated by navarch.fleet.load.load_fleet.

    Raises
    ConfigError naming `origin` (the scenario file) and the key path for a result the
    loader refuses.
    """
    if not overrides:
        return load_fleet(path)
    data = yaml.safe_load(read_fleet_text(path))
    spares = overrides.get("spares")
    for pool in dict(data.get("pools") or {}).values():
        health = pool.setdefault("health", {})
        if spares is not None:
            pool.setdefault("nodes", {})["spares"] = int(spares)
        if "remediation" in overrides:
            health["remediation"] = list(overrides["remediation"])
        if "surge_on" in overrides:
            health["surge_on"] = str(overrides["surge_on"])
        if "acceptance" in overrides:
            pool["acceptance"] = dict(overrides["acceptance"])
    with tempfile.TemporaryDirectory(prefix="navarch-simulate-") as tmp:
        variant = Path(tmp) / path.name
        variant.write_text(yaml.safe_dump(data, sort_keys=False))
        try:
            return load_fleet(variant)
        except ConfigError as exc:
            raise ConfigError(
                f"the fleet {path} with the scenario's pool overrides is invalid: {exc.message}",
                file=origin,
                key_path=f"pool ({exc.key_path})" if exc.key_path else "pool",
                hint="set only what the fleet file's pools accept (docs/simulate.md)",
            ) from exc
