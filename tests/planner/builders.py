"""Builders for the planner's inputs: FleetSpec, Instances, ReportObservations, Memory.

Used by the scenario test (tests/planner/scenarios/*.yaml) and the hypothesis properties.
Every fleet goes through the real navarch.fleet.load.load_fleet (schema, defaults, cross-field
rules), so a test can never hand the planner a fleet that fleet.yaml could not express.

Times are aware UTC datetimes. Where a builder takes a time it also accepts the scenario
shorthand `when(now, "-20m")`: a signed duration relative to `now`, or "now".
"""

from __future__ import annotations

import hashlib
import importlib
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from navarch.capabilities import Capability
from navarch.fleet.durations import parse_duration_s
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import FleetSpec, Scheduler
from navarch.inventory import (
    CloudEvent,
    CloudStatus,
    Instance,
    InstanceHealth,
    InstanceState,
    launch_id,
    ownership_tags,
)
from navarch.planner.model import (
    Cordon,
    Diag,
    Exhausted,
    Fault,
    Memory,
    NodeMemory,
    Phase,
    PoolMemory,
    PoolSettings,
    ReportObservation,
    ReportSummary,
)
from navarch.reconcile.codec import cordon_from_json
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import NoticeKind
from navarch.report.timefmt import parse_ts

#: libyaml's emitter when PyYAML has it: the property tests dump a fleet per example.
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

BASE_NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)

# --- fleets ---------------------------------------------------------------------------------

_FLEET_DIR: Path | None = None
_FLEETS: dict[str, FleetSpec] = {}
_FLEETS_BY_DOC: dict[str, FleetSpec] = {}


#: The provider class of each built-in type, by module and class name.
_PROVIDER_CLASSES = {
    "local": ("navarch.providers.local", "LocalProvider"),
    "aws": ("navarch.providers.aws", "AwsProvider"),
    "gcp": ("navarch.providers.gcp", "GcpProvider"),
    "azure": ("navarch.providers.azure", "AzureProvider"),
    "lambda": ("navarch.providers.lambda_cloud", "LambdaProvider"),
}


def capabilities(spec: FleetSpec) -> dict[str, Capability]:
    """What each of the spec's providers declares it can do, by fleet.yaml name, read from
    the provider classes as `navarch plan` reads it from the opened providers."""
    out: dict[str, Capability] = {}
    for name, config in spec.providers.items():
        module, cls = _PROVIDER_CLASSES[str(config.get("type"))]
        out[name] = getattr(importlib.import_module(module), cls).capabilities
    return out


def fleet_from_yaml(text: str, directory: Path | None = None) -> FleetSpec:
    """Write `text` as fleet.yaml and load it with navarch.fleet.load.load_fleet.

    directory: where to write it (a test's tmp_path); None uses one process-wide temporary
    directory and caches the FleetSpec by the text, so hypothesis examples stay cheap.
    Raises ConfigError exactly as `navarch plan` would for a bad fleet.
    """
    if directory is not None:
        path = directory / "fleet.yaml"
        path.write_text(text)
        return load_fleet(path)
    global _FLEET_DIR
    if text in _FLEETS:
        return _FLEETS[text]
    if _FLEET_DIR is None:
        _FLEET_DIR = Path(tempfile.mkdtemp(prefix="navarch-planner-tests-"))
    path = _FLEET_DIR / (hashlib.sha256(text.encode()).hexdigest()[:16] + ".yaml")
    path.write_text(text)
    spec = load_fleet(path)
    _FLEETS[text] = spec
    return spec


def fleet_from_dict(doc: Mapping[str, Any], directory: Path | None = None) -> FleetSpec:
    """Like fleet_from_yaml for a fleet.yaml document given as plain data. With no
    directory the FleetSpec is also cached by the document's repr, which tells apart every
    value YAML does (1, 1.0 and True; a list and a tuple), so a document seen before
    skips the YAML dump too."""
    if directory is not None:
        return fleet_from_yaml(_yaml(doc), directory)
    key = repr(doc)
    if key not in _FLEETS_BY_DOC:
        _FLEETS_BY_DOC[key] = fleet_from_yaml(_yaml(doc))
    return _FLEETS_BY_DOC[key]


def _yaml(doc: Mapping[str, Any]) -> str:
    return yaml.dump(dict(doc), Dumper=_DUMPER, sort_keys=True)


def pool_doc(
    *,
    target: int,
    min_nodes: int = 0,
    max_nodes: int | None = None,
    zones: Iterable[str] = ("z1", "z2"),
    instance_types: Iterable[str] = ("t1",),
    capacity: str = "on-demand",
    scheduler: str = "none",
    provider: str = "sim",
    health: Mapping[str, Any] | None = None,
    autoscaling: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One pool's fleet.yaml mapping with the given knobs (the schema fills the rest)."""
    nodes: dict[str, Any] = {"min": min_nodes, "target": target}
    if max_nodes is not None:
        nodes["max"] = max_nodes
    doc: dict[str, Any] = {
        "provider": provider,
        "instance_types": list(instance_types),
        "zones": list(zones),
        "capacity": capacity,
        "scheduler": scheduler,
        "nodes": nodes,
    }
    if health:
        doc["health"] = dict(health)
    if autoscaling:
        doc["autoscaling"] = dict(autoscaling)
    return doc


def fleet_doc(
    name: str, pools: Mapping[str, Mapping[str, Any]], safety: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A fleet.yaml document on the local provider "sim" with the given pools."""
    doc: dict[str, Any] = {
        "fleet": name,
        "secret": {"env": "NAVARCH_TEST_SECRET"},
        "providers": {"sim": {"type": "local"}, "sim2": {"type": "local"}},
        "pools": {k: dict(v) for k, v in pools.items()},
    }
    if safety:
        doc["safety"] = dict(safety)
    return doc


# --- times ----------------------------------------------------------------------------------


def when(now: datetime, value: Any) -> datetime | None:
    """A time from a scenario: None, a datetime, RFC 3339 text, "now", or "-20m"/"+1h"."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a timezone")
        return value.astimezone(UTC)
    text = str(value).strip()
    if text == "now":
        return now
    if text[:1] in "+-":
        sign = -1 if text[0] == "-" else 1
        return now + timedelta(seconds=sign * parse_duration_s(text[1:]))
    return parse_ts(text)


# --- inventory ------------------------------------------------------------------------------


def instance(
    fleet: str,
    pool: str,
    node: str,
    *,
    launched_at: datetime,
    state: str | InstanceState = InstanceState.RUNNING,
    instance_id: str | None = None,
    provider: str = "sim",
    zone: str = "z1",
    instance_type: str = "t1",
    spot: bool = False,
    attempt: int = 0,
    tags: Mapping[str, str] | None = None,
    host_id: str | None = None,
    health: str | InstanceHealth = InstanceHealth.UNKNOWN,
    health_detail: str = "",
    event: str | CloudEvent | None = None,
    event_deadline: datetime | None = None,
    topology: Sequence[str] = (),
) -> Instance:
    """An instance navarch launched: it carries the four ownership tags for (fleet, pool,
    node), plus `tags` (labels, a navarch-spec launch hash); health, health_detail, event
    and event_deadline are the cloud's own status of it; topology its place in the fabric
    (coarse to fine)."""
    tags = {**(tags or {}), **ownership_tags(fleet, pool, node, launch_id(fleet, node, attempt))}
    return Instance(
        provider=provider,
        instance_id=instance_id or f"i-{node}",
        zone=zone,
        instance_type=instance_type,
        state=InstanceState(state),
        launched_at=launched_at,
        tags=tuple(sorted(tags.items())),
        spot=spot,
        host_id=host_id,
        cloud_status=CloudStatus(
            InstanceHealth(health),
            health_detail,
            event=CloudEvent(event) if event else None,
            event_deadline=event_deadline,
        ),
        topology=tuple(topology),
    )


def foreign_instance(
    instance_id: str,
    *,
    launched_at: datetime,
    tags: Mapping[str, str] | None = None,
    provider: str = "sim",
    state: str | InstanceState = InstanceState.RUNNING,
) -> Instance:
    """An instance with arbitrary (possibly no, possibly look-alike) tags."""
    return Instance(
        provider=provider,
        instance_id=instance_id,
        zone="z1",
        instance_type="t1",
        state=InstanceState(state),
        launched_at=launched_at,
        tags=tuple(sorted((tags or {}).items())),
    )


# --- reports --------------------------------------------------------------------------------


def summary(
    *,
    sequence: int,
    generated_at: datetime,
    status: str = "healthy",
    boot_id: str = "boot-1",
    fatal: bool = False,
    findings: Iterable[str] = (),
    notice_kind: str | None = None,
    notice_deadline: datetime | None = None,
    process_count: int | None = 0,
    utilization_pct: float | None = None,
    gpu_count: int = 8,
    action: str | None = None,
    fault_key: str | FaultKey | None = None,
    consecutive: int = 0,
) -> ReportSummary:
    """A ReportSummary as navarch.reconcile.reports.summarize would make it. action: the
    recommended action (default: none, or replace when unhealthy); fault_key: the
    structured key of the fault it shows (FaultKey, or its text form "xid:79@gpu0");
    consecutive: the agent's checks in a row that saw that fault."""
    if action is None:
        action = {"healthy": "none", "degraded": "none", "unknown": "none"}.get(status, "replace")
    return ReportSummary(
        sequence=sequence,
        boot_id=boot_id,
        generated_at=generated_at,
        status=Status(status),
        action=Remedy(action),
        fault_key=FaultKey.parse(fault_key) if isinstance(fault_key, str) else fault_key,
        consecutive=consecutive,
        health_score={"healthy": 100, "degraded": 70, "unknown": 50}.get(status, 0),
        fatal=fatal,
        findings=tuple(findings),
        notice_kind=NoticeKind(notice_kind) if notice_kind else None,
        notice_deadline=notice_deadline,
        process_count=process_count,
        utilization_pct=utilization_pct,
        gpu_count=gpu_count,
    )


def observation(
    node: str,
    pool: str,
    report: ReportSummary | None = None,
    *,
    rejected: str | None = None,
    version: str | None = None,
) -> ReportObservation:
    """What navarch.reconcile.reports.read_reports returns for one node.

    For a rejected object `report` is the last accepted summary (or None), as read_reports
    passes it; version defaults to one derived from the report's sequence.
    """
    if version is None:
        if rejected:
            version = f"rejected-{rejected}"
        elif report is not None:
            version = f"v{report.sequence}"
    return ReportObservation(
        node=node, pool=pool, summary=report, version=version, rejected=rejected
    )


# --- memory ---------------------------------------------------------------------------------


def node_memory(
    node: str,
    pool: str,
    *,
    phase: str | Phase = Phase.NONE,
    phase_at: datetime | None = None,
    phase_reason: str = "",
    repair: bool = False,
    streak: int = 0,
    streak_sequence: int = 0,
    report: ReportSummary | None = None,
    first_seen_at: datetime | None = None,
    instance_id: str | None = None,
    launch: Mapping[str, str] | None = None,
    fault: Mapping[str, Any] | Fault | None = None,
    faults: Iterable[tuple[str, datetime]] = (),
    rung: str | Remedy | None = None,
    rung_fault: str = "",
    rung_at: datetime | None = None,
    return_streak: int = 0,
    operator_cordon: str = "",
    diag: Diag | None = None,
    diag_cordon: bool = False,
    impaired_since: datetime | None = None,
    impaired_cordon: bool = False,
    silent_cordon: bool = False,
    scale_down_cordon: bool = False,
    acceptance_cordon: bool = False,
    idle_cordon: bool = False,
    cordon: Cordon | None = None,
) -> NodeMemory:
    """What earlier runs remembered of one node (report_version follows report's sequence).
    fault: a Fault or its fields {key, action, boot_id, sequence}; the rest are the
    remediation ladder's NodeMemory fields (diag: a Diag, scheduled diagnostics' too).
    cordon: the node's Cordon; else the one the flags of a state written before it stand
    for (repair, operator_cordon, *_cordon: navarch.reconcile.codec.cordon_from_json)."""
    if isinstance(fault, Mapping):
        fault = Fault(
            FaultKey.parse(fault["key"]),
            Remedy(fault.get("action", "reboot")),
            fault.get("boot_id", "boot-1"),
            fault.get("sequence", 0),
        )
    return NodeMemory(
        node=node,
        pool=pool,
        instance_id=instance_id or f"i-{node}",
        first_seen_at=first_seen_at,
        phase=Phase(phase),
        phase_at=phase_at,
        phase_reason=phase_reason,
        report_version=f"v{report.sequence}" if report is not None else None,
        report=report,
        streak=streak,
        streak_sequence=streak_sequence,
        launch=tuple(sorted((launch or {}).items())),
        fault=fault,
        faults=tuple(faults),
        rung=Remedy(rung) if rung else None,
        rung_fault=rung_fault,
        rung_at=rung_at,
        return_streak=return_streak,
        cordon=cordon
        or cordon_from_json(
            {
                "phase": Phase(phase).value,
                "phase_at": phase_at.isoformat() if phase_at else None,
                "fault": {"key": fault.key.format()} if fault is not None else None,
                "repair": repair,
                "operator_cordon": operator_cordon,
                "diag_cordon": diag_cordon,
                "impaired_cordon": impaired_cordon,
                "silent_cordon": silent_cordon,
                "scale_down_cordon": scale_down_cordon,
                "burn_in_cordon": acceptance_cordon,  # the old flag kept the old word
                "idle_cordon": idle_cordon,
            }
        ),
        diag=diag,
        impaired_since=impaired_since,
    )


def exhausted(
    zone: str,
    instance_type: str,
    *,
    until: datetime,
    provider: str,
    spot: bool = False,
    failures: int = 1,
) -> Exhausted:
    return Exhausted(
        zone=zone,
        instance_type=instance_type,
        spot=spot,
        until=until,
        failures=failures,
        provider=provider,
    )


def pool_memory(
    pool: str,
    *,
    next_index: int = 1,
    repairs: Iterable[datetime] = (),
    exhausted: Iterable[Exhausted] = (),
    desired: int | None = None,
    desired_from_target: int | None = None,
    scaled_at: datetime | None = None,
    lemons: Iterable[str] = (),
    host_faults: Iterable[tuple[str, str, datetime]] = (),
    settings: PoolSettings | None = None,
    retiring_since: datetime | None = None,
    spares: Iterable[str] = (),
) -> PoolMemory:
    return PoolMemory(
        pool=pool,
        next_index=next_index,
        repairs=tuple(repairs),
        exhausted=tuple(exhausted),
        desired=desired,
        desired_from_target=desired_from_target,
        scaled_at=scaled_at,
        lemons=tuple(lemons),
        host_faults=tuple(host_faults),
        settings=settings,
        retiring_since=retiring_since,
        spares=tuple(sorted(spares)),
    )


def pool_settings(raw: Mapping[str, Any]) -> PoolSettings:
    """PoolSettings from a scenario's fleet.yaml-like mapping: scheduler, playbooks, ssh,
    drain_timeout and stale_after as durations ("45m"), max_unavailable as a count; what
    is left out takes PoolSettings' defaults."""
    unknown = set(raw) - {
        "scheduler",
        "playbooks",
        "ssh",
        "drain_timeout",
        "stale_after",
        "max_unavailable",
    }
    assert not unknown, f"unknown pool settings keys {sorted(unknown)}"
    base = PoolSettings()
    return PoolSettings(
        scheduler=Scheduler(raw.get("scheduler", base.scheduler)),
        playbooks=tuple(sorted((raw.get("playbooks") or {}).items())),
        ssh=tuple(sorted((raw.get("ssh") or {}).items())),
        drain_timeout_s=(
            parse_duration_s(raw["drain_timeout"])
            if "drain_timeout" in raw
            else base.drain_timeout_s
        ),
        stale_after_s=(
            parse_duration_s(raw["stale_after"]) if "stale_after" in raw else base.stale_after_s
        ),
        max_unavailable=raw.get("max_unavailable", base.max_unavailable),
    )


def memory(
    fleet: str, nodes: Iterable[NodeMemory] = (), pools: Iterable[PoolMemory] = (), serial: int = 1
) -> Memory:
    """A Memory with nodes and pools sorted by name, as navarch.reconcile.state writes it."""
    return Memory(
        fleet=fleet,
        serial=serial,
        lineage="test",
        nodes=tuple(sorted(nodes, key=lambda n: n.node)),
        pools=tuple(sorted(pools, key=lambda p: p.pool)),
    )
