"""The desired state: FleetSpec and its parts, as navarch.fleet.load loads them from
fleet.yaml. Plain frozen data: no I/O here (the fleet secret is read by the reconcile run,
navarch.fleet.secret.read_fleet_secret; this module holds only where it comes from).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from navarch.fleet.modes import Mode
from navarch.fleet.policy import Rule
from navarch.fleet.remedies import RemedyRow
from navarch.report.acceptance import AcceptancePolicy
from navarch.report.compat import StrEnum
from navarch.report.health import Remedy


class SurgeOn(StrEnum):
    """Which rungs of the ladder get a surge replacement when their node is cordoned:
    ``replace`` only the terminate rung (a GPU reset or reboot brings the node back, so a
    second machine would be scaled away again), ``any`` every fault (the default: the
    surge serves while the ladder reboots, and whichever comes back second is the surplus,
    the once-faulty node first; a simulation study put fault -> serving p95 at 9.2 min
    against 15.9-17.3 min for ``replace``, docs/health-policy.md)."""

    REPLACE = "replace"
    ANY = "any"


class TopologyMatch(StrEnum):
    """Where a pool's replacement asks to land in the fabric: ``any`` (wherever capacity
    is) or ``same_block`` (the topology block, Instance.block, of the node it replaces)."""

    ANY = "any"
    SAME_BLOCK = "same_block"


class Scheduler(StrEnum):
    """The workload scheduler a pool's cordon and drain speak to (its built-in playbooks,
    playbooks/<scheduler>.yaml); ``none`` has no built-in steps."""

    NONE = "none"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


class UpdateStrategy(StrEnum):
    """How drift is rolled out: ``rolling`` replaces drifted nodes within the disruption
    budget; ``on-replace`` only gives replacements the new settings."""

    ROLLING = "rolling"
    ON_REPLACE = "on-replace"


class Replacement(StrEnum):
    """How a pool replaces a node it retires: ``surge`` launches the replacement first
    (capacity never dips, up to max + max_surge nodes), ``after-terminate`` only once the
    old node is gone (never above max)."""

    SURGE = "surge"
    AFTER_TERMINATE = "after-terminate"


class ZonePolicy(StrEnum):
    """How a pool places its nodes across the zones of each placement: ``spread`` keeps
    the nodes per zone within one of each other (an EC2 Auto Scaling group's AZ
    balancing), ``pack`` fills one zone and moves on only when it has no capacity."""

    SPREAD = "spread"
    PACK = "pack"


@dataclass(frozen=True)
class NetworkPolicy:
    """health.network: RDMA ports that must be ACTIVE at rate_gbps (Gb/s) or more on every
    node of the pool; None: not set (the agent falls back to the acceptance expectation)."""

    ports: int | None = None
    rate_gbps: float | None = None

    def to_agent(self) -> dict[str, Any] | None:
        """As agent.yaml's ``network`` mapping; None when neither is set."""
        if self.ports is None and self.rate_gbps is None:
            return None
        return {"ports": self.ports, "rate_gbps": self.rate_gbps}


@dataclass(frozen=True)
class HealthPolicy:
    """A pool's health policy; durations in seconds."""

    unhealthy_after: int
    stale_after_s: int
    offline_after_s: int
    boot_timeout_s: int
    drain_timeout_s: int
    auto_replace: bool
    max_unavailable: int | str  # a count, or "25%" of target
    replacement: Replacement
    max_surge: int
    provision_timeout_s: int = 900  # cluster autoscaler's max-node-provision-time default
    # Health rules and the remediation ladder (docs/health-policy.md).
    rules: tuple[Rule, ...] = ()  # the pool's own health.rules, compiled
    fleet_rules: tuple[Rule, ...] = ()  # the fleet-wide health.rules, compiled
    remediation: tuple[Remedy, ...] = (Remedy.REBOOT, Remedy.REPLACE)  # cheapest first
    return_after: int = 3  # distinct healthy reports from the new boot before uncordon
    ladder_window_s: int = 86400  # the same fault again within this climbs a rung
    lemon_after: int = 3  # faults within lemon_window_s that make a node a lemon
    lemon_window_s: int = 604800
    return_requires_diag: int | None = None  # dcgmi diag level before return; None: off
    return_timeout_s: int = 3600  # not returned this long after a remedy: climb a rung
    surge_on: SurgeOn = SurgeOn.ANY  # which rungs get a surge replacement
    #: health.remedies: the operator's remediation table rows, before the built-in ones
    remedies: tuple[RemedyRow, ...] = ()
    # This many nodes of one topology block failing within the window is a rack or
    # switch fault: the ladder stops for the block (navarch.planner.hosts).
    block_fault_after: int = 3
    block_fault_window_s: int = 600
    #: The agent's check period on the pool's nodes (its systemd timer's OnUnitActiveSec):
    #: the wait a fault's first report adds to the reaction time.
    check_every_s: int = 30
    #: health.network: the RDMA ports the agent holds each node to while it serves
    network: NetworkPolicy = NetworkPolicy()

    def rule_sets(self) -> tuple[tuple[Rule, ...], ...]:
        """The rule sets navarch.fleet.policy.evaluate() takes: the pool's, then the fleet's."""
        return (self.rules, self.fleet_rules)

    def max_unavailable_nodes(self, target: int) -> int:
        """The disruption budget as a node count: a percentage rounds down, at least 1."""
        if isinstance(self.max_unavailable, str):
            pct = int(self.max_unavailable.rstrip("%"))
            return max(1, target * pct // 100)
        return self.max_unavailable


@dataclass(frozen=True)
class Diagnostics:
    """Scheduled active diagnostics (dcgmi diag): every_s None means never on a schedule;
    level is the dcgmi diag -r level (1 quick, 2 medium, 3 long; DCGM documentation)."""

    every_s: int | None = None
    level: int = 2
    # Per level 1-3: about three times DCGM's documented run time (seconds, ~2 min, ~15 min).
    time_limits_s: tuple[int, int, int] = (300, 600, 2700)
    #: acceptance tests (AcceptanceTest values of the agent's tools) run instead of dcgmi
    #: diag alone, by the node's agent, while the node is cordoned; () for dcgmi diag
    tests: tuple[str, ...] = ()

    def time_limit_s(self, level: int) -> int:
        """How long a started `dcgmi diag -r level` may run before navarch stops waiting
        for it, in seconds (levels 1-3; DCGM documentation's run times, tripled)."""
        return self.time_limits_s[min(max(level, 1), 3) - 1]


@dataclass(frozen=True)
class Autoscaling:
    """Reactive autoscaling on mean reported GPU utilisation (percent)."""

    enabled: bool
    scale_up_at_pct: float
    scale_down_at_pct: float
    cooldown_s: int


@dataclass(frozen=True)
class Placement:
    """One provider a pool may launch on: its zones and instance types in
    fallback order, capacity mode and provider options (the type's section: aws:, gcp:,
    ...). A single-provider pool is the one-placement case."""

    provider: str
    provider_type: str
    region: str
    zones: tuple[str, ...]
    instance_types: tuple[str, ...]
    capacity: str  # "on-demand" | "spot" | "spot-then-on-demand"
    options: Mapping[str, Any]

    def label(self) -> str:
        """The placement for humans, e.g. "aws us-east-1" (region only when declared)."""
        return f"{self.provider} {self.region}".strip()

    def places(self) -> tuple[tuple[str, str, bool], ...]:
        """Every (zone, instance_type, spot) of this placement in fallback order.

        Order (docs/design.md, Safety rules, rule 6): every zone of the first type, then the next;
        spot-then-on-demand tries all spot places before any on-demand one.
        """
        spot_modes = {"on-demand": (False,), "spot": (True,), "spot-then-on-demand": (True, False)}
        return tuple(
            (zone, itype, spot)
            for spot in spot_modes[self.capacity]
            for itype in self.instance_types
            for zone in self.zones
        )

    def matches(self, provider: str, zone: str, instance_type: str) -> bool:
        """True when an instance with these coordinates was launched in this placement."""
        return (
            provider == self.provider
            and zone in self.zones
            and instance_type in self.instance_types
        )


@dataclass(frozen=True)
class PlaceSpec:
    """One place a pool may launch in: placement index (into PoolSpec.placements), its
    provider, zone, instance type and spot flag."""

    placement: int
    provider: str
    zone: str
    instance_type: str
    spot: bool


@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical nodes. instance_types and zones are in fallback order.

    provider, region, zones, instance_types, capacity, options and provider_type are the
    first placement's; placements holds every one, in declared order, and
    place_order the effective launch order when `placement:` is not `ordered`.
    """

    name: str
    placements: tuple[Placement, ...]  # at least one, in declared order
    gpus_per_node: int
    min_nodes: int
    target_nodes: int
    max_nodes: int
    labels: tuple[tuple[str, str], ...]
    scheduler: Scheduler
    playbooks: Mapping[str, str]
    ssh: Mapping[str, Any]
    health: HealthPolicy
    autoscaling: Autoscaling
    update_strategy: UpdateStrategy = UpdateStrategy.ROLLING
    diagnostics: Diagnostics = Diagnostics()
    placement: str = "ordered"  # "ordered" | "cheapest" | a navarch.placement plugin name
    place_order: tuple[PlaceSpec, ...] = ()  # effective order when not "ordered"
    #: acceptance: the acceptance suite new and remedied nodes pass before serving (None: off)
    acceptance: AcceptancePolicy | None = None
    topology: TopologyMatch = TopologyMatch.ANY  # where a replacement asks to land
    #: warm spares (nodes.spares): healthy nodes beyond target kept cordoned from the
    #: scheduler and promoted when a node leaves service for a fault; counted against max
    spare_nodes: int = 0
    zone_policy: ZonePolicy = ZonePolicy.SPREAD  # how nodes sit across a placement's zones
    #: how far navarch may act on the pool (navarch.fleet.modes; a remediation row may
    #: hold a fault class back further, never grant more)
    mode: Mode = Mode.FULL

    @property
    def provider(self) -> str:
        """The first placement's provider: the one a pool is listed under (status) and
        launches on by default (cloud-init without a placement)."""
        return self.placements[0].provider

    def placed(self) -> tuple[Placement, ...]:
        """Every placement, in declared order."""
        return self.placements

    def placement_of(
        self, provider: str, zone: str, instance_type: str
    ) -> tuple[int, Placement] | None:
        """The placement an instance was launched in -> (index, placement): the first whose
        provider, zones and types hold it, else the first on the same provider (a zone or
        type since removed from it), else None (its provider is in no placement)."""
        placed = self.placed()
        for i, pl in enumerate(placed):
            if pl.matches(provider, zone, instance_type):
                return i, pl
        for i, pl in enumerate(placed):
            if pl.provider == provider:
                return i, pl
        return None

    def launch_places(self) -> tuple[PlaceSpec, ...]:
        """Every place in launch order: place_order when set (cheapest or a plugin's
        order), else each placement's places in declared order (zone, type, placement)."""
        if self.place_order:
            return self.place_order
        return tuple(
            PlaceSpec(i, pl.provider, zone, itype, spot)
            for i, pl in enumerate(self.placed())
            for zone, itype, spot in pl.places()
        )

    def launch_settings(self, placement: int = 0) -> tuple[tuple[str, str], ...]:
        """The settings that shape a launched machine beyond its type, zone and capacity:
        the placement's provider options (image/AMI, disk, subnet, agent_package, ...) and
        the pool's GPU count, flattened to sorted (dotted key, JSON value) pairs. Labels
        are not here: they are updated in place (see labels). placement: an index into
        placed(); raises IndexError for another. Computed once per PoolSpec (observe asks
        for every node, every run)."""
        return self._launch_settings[placement]

    @cached_property
    def _launch_settings(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        return tuple(self._settings_of(pl.options) for pl in self.placed())

    def _settings_of(self, options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        flat: dict[str, str] = {"gpus_per_node": json.dumps(self.gpus_per_node)}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, Mapping) and value:
                for k in value:
                    walk(f"{prefix}.{k}" if prefix else str(k), value[k])
            else:
                flat[prefix] = json.dumps(value, sort_keys=True)

        for key, value in options.items():
            walk(str(key), value)
        return tuple(sorted(flat.items()))

    def launch_hash(self, placement: int = 0) -> str:
        """12 hex characters of SHA-256 over launch_settings(placement): the navarch-spec
        tag every instance is launched with, so drift is seen even after Memory is lost."""
        settings = self.launch_settings(placement)
        return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:12]

    def places(self) -> tuple[tuple[str, str, bool], ...]:
        """Every (zone, instance_type, spot) in launch order (see launch_places)."""
        return tuple((p.zone, p.instance_type, p.spot) for p in self.launch_places())


@dataclass(frozen=True)
class SafetySpec:
    circuit_breaker_pct: float
    fleet_circuit_breaker_pct: float
    repairs_per_pool_per_hour: int
    lock_ttl_s: int
    max_orphan_terminations: int | None = None  # None: max(10, 20% of the fleet)
    #: Most nodes one run provisions; more are held back with a safety stop (exit 3), so a
    #: typo in nodes.target cannot launch thousands of GPU nodes under --auto-approve.
    max_launches_per_run: int = 100

    def orphan_limit(self, fleet_nodes: int) -> int:
        """How many orphans one run may terminate: the setting, or 10 nodes or 20% of the
        fleet, whichever is larger (Terraform prevent_destroy in spirit: one bad run must not
        delete a fleet)."""
        if self.max_orphan_terminations is not None:
            return self.max_orphan_terminations
        return max(10, fleet_nodes // 5)


@dataclass(frozen=True)
class SinkSpec:
    """One notify: sink (schemas/fleet.schema.json $defs.sink), defaulted.

    url/secret/routing_key are secret references ({"value": URL} for a plain URL, {"env":
    VAR} or {"file": PATH}); navarch.notify resolves them at send time, never logs them.
    events: kinds this sink gets (empty: its type's default). timeout_s: one HTTP attempt.
    A type outside BUILTIN_SINKS names a navarch.notifiers plugin; options are its own
    settings (None for the built-ins).
    """

    type: str
    name: str
    options: Mapping[str, Any] | None = None  # a notifier plugin's own settings
    url: Mapping[str, str] | None = None
    path: str | None = None
    secret: Mapping[str, str] | None = None
    routing_key: Mapping[str, str] | None = None
    events: tuple[str, ...] = ()
    min_severity: str = "info"
    timeout_s: float = 5.0
    retries: int = 2


@dataclass(frozen=True)
class MetricsSpec:
    """fleet.yaml metrics: (pushgateway URL or None, its job label, push timeout)."""

    pushgateway: str | None = None
    job: str = "navarch"
    timeout_s: float = 10.0


@dataclass(frozen=True)
class FleetSpec:
    """The whole declared fleet. providers maps name -> its fleet.yaml mapping (defaulted)."""

    name: str
    source: Path
    base_dir: Path
    store_url: str
    secret: Mapping[str, str]
    providers: Mapping[str, Mapping[str, Any]]
    pools: tuple[PoolSpec, ...]
    safety: SafetySpec
    health_rules: tuple[Rule, ...] = ()  # fleet-wide health.rules, compiled
    notify: tuple[SinkSpec, ...] = ()  # notify: sinks, told of every apply's result
    metrics: MetricsSpec = MetricsSpec()
    status_page: bool = False  # apply writes status/<fleet>/index.html to the store
    #: reserved capacity idle (billed, unused) this long is notified (reservation_idle)
    reservation_idle_after_s: int = 3600

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)
