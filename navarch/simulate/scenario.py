"""Scenario files for `navarch simulate` (schemas/simulate.schema.json).

Defaults of the failure model come from published figures:
- Llama 3 405B training (Meta, "The Llama 3 Herd of Models", 2024): 419 unexpected
  interruptions in 54 days on 16,384 H100 GPUs = 2,048 8-GPU nodes -> 3.8e-3 per node-day;
  58.7 % GPU-related (faulty GPU 30.1 %, HBM3 17.2 %, ...), the rest software, network, host.
- RSC-1 (Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters",
  2024): about 6.5e-3 failures per node-day.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from navarch.durations import parse_duration_s
from navarch.errors import ConfigError
from navarch.fleet_file import load_schema

LLAMA3_RATE_PER_NODE_DAY = 3.8e-3
RSC1_RATE_PER_NODE_DAY = 6.5e-3

#: Llama 3 cause mix (shares of unexpected interruptions), mapped to what the agent reports.
DEFAULT_CAUSES: dict[str, float] = {
    "xid79": 0.301,  # faulty GPU: fallen off the bus
    "hbm_ecc": 0.172,  # HBM3: XID 48/64/95, uncorrectable ECC
    "nvlink": 0.081,  # network switch/cable + NVLink
    "gpu_lost": 0.05,  # GPU SRAM / system processor / lost
    "thermal": 0.03,
    "host_down": 0.136,  # host maintenance, unplanned host failure: agent stops
    "software": 0.23,  # software bugs: application XIDs, nothing to repair
}


@dataclass(frozen=True)
class Window:
    """An event in time: start at_s after the start, for for_s; optional zone/type."""

    at_s: int
    for_s: int
    zone: str = ""
    instance_type: str = ""
    nodes: int = 0


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario; times in seconds."""

    source: Path
    name: str
    fleet_path: Path
    duration_s: int
    reconcile_period_s: int
    agent_period_s: int
    seed: int
    failure_rate_per_node_day: float
    causes: dict[str, float]
    lemon_fraction: float
    lemon_multiplier: float
    app_xid_bursts_per_node_day: float
    spot_preemptions_per_node_day: float
    reboot_cures: float
    boot_min_s: int
    boot_max_s: int
    api_error_rate: float
    zone_outages: tuple[Window, ...]
    rack_failures: tuple[Window, ...]
    stockouts: tuple[Window, ...]
    agent_outages: tuple[Window, ...]
    store_outages: tuple[Window, ...]
    prices_usd_per_hour: dict[str, float]
    asserts: tuple[str, ...]
    raw: dict[str, Any] = field(default_factory=dict)


def _windows(items: list[dict[str, Any]]) -> tuple[Window, ...]:
    return tuple(
        Window(
            parse_duration_s(str(w["at"])),
            parse_duration_s(str(w["for"])),
            w.get("zone", ""),
            w.get("instance_type", ""),
            int(w.get("nodes", 0)),
        )
        for w in items
    )


def load_scenario(path: str | Path) -> Scenario:
    """Load and validate a scenario YAML. Raises ConfigError naming the file and key path."""
    import jsonschema

    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"cannot read scenario: {exc}",
            file=str(source),
            hint="give a scenario YAML, see docs/simulate.md",
        ) from exc
    validator = jsonschema.Draft202012Validator(load_schema("simulate.schema.json"))
    for err in validator.iter_errors(data):
        raise ConfigError(
            err.message,
            file=str(source),
            key_path=".".join(str(p) for p in err.absolute_path) or "(top)",
            hint="see docs/simulate.md for the scenario format",
        )
    for key, default in (("duration", None), ("reconcile_period", "5m"), ("agent_period", "5m")):
        # The engine divides by each of them: a zero would end in ZeroDivisionError.
        raw = data.get(key, default)
        if raw is not None and parse_duration_s(str(raw)) <= 0:
            raise ConfigError(
                f"{key} must be longer than 0s, got {raw}",
                file=str(source),
                key_path=key,
                hint="use a positive duration such as 5m",
            )
    world = data.get("world", {})
    causes = dict(DEFAULT_CAUSES)
    causes.update(world.get("causes", {}))
    lemons = world.get("lemons", {})
    boot = world.get("boot_time", {})
    return Scenario(
        source=source,
        name=data.get("name", source.stem),
        fleet_path=(source.parent / data["fleet"]).resolve(),
        duration_s=parse_duration_s(str(data["duration"])),
        reconcile_period_s=parse_duration_s(str(data.get("reconcile_period", "5m"))),
        agent_period_s=parse_duration_s(str(data.get("agent_period", "5m"))),
        seed=int(data.get("seed", 1)),
        failure_rate_per_node_day=float(
            world.get("failure_rate_per_node_day", LLAMA3_RATE_PER_NODE_DAY)
        ),
        causes=causes,
        lemon_fraction=float(lemons.get("fraction", 0.0)),
        lemon_multiplier=float(lemons.get("multiplier", 20.0)),
        app_xid_bursts_per_node_day=float(world.get("app_xid_bursts_per_node_day", 0.0)),
        spot_preemptions_per_node_day=float(world.get("spot_preemptions_per_node_day", 0.0)),
        reboot_cures=float(world.get("reboot_cures", 0.5)),
        boot_min_s=parse_duration_s(str(boot.get("min", "3m"))),
        boot_max_s=parse_duration_s(str(boot.get("max", "8m"))),
        api_error_rate=float(world.get("api_error_rate", 0.0)),
        zone_outages=_windows(world.get("zone_outages", [])),
        rack_failures=_windows(world.get("rack_failures", [])),
        stockouts=_windows(world.get("stockouts", [])),
        agent_outages=_windows(world.get("agent_outages", [])),
        store_outages=_windows(world.get("store_outages", [])),
        prices_usd_per_hour={str(k): float(v) for k, v in data.get("prices", {}).items()},
        asserts=tuple(data.get("assert", [])),
        raw=data,
    )
