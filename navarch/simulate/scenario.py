"""Scenario files for `navarch simulate` (schemas/simulate.schema.json).

Defaults of the world model, each with its source (docs/simulate.md has the table); an
"assumption" is a value no published figure gives, chosen as said:
- Failure rate: Llama 3 405B training (Meta, "The Llama 3 Herd of Models", 2024): 419
  unexpected interruptions in 54 days on 16,384 H100 GPUs = 2,048 8-GPU nodes -> 3.8e-3
  per node-day. The cause mix by the same paper's counts (Table 5: faulty GPU 148 of 419,
  HBM3 72, network switch/cable 35 and NIC 7, ...: LLAMA3_TABLE5_COUNTS), not its printed
  percentages, which do not match them. RSC-1 (Kokolis et
  al., "Revisiting Reliability in Large-Scale ML Research Clusters", 2024): about 6.5e-3.
- Cures in place (CURES): Crusoe's H200 cluster (GTC 2025, as tabled by G. Lockwood,
  "component reliability"): "GPU recoverable faults" 19.5 % against "GPU host replacement"
  41.5 % of cases, so about one GPU fault in three (19.5 / 61 = 0.32) recovers without a
  replacement; which rung cures which fault follows the NVIDIA XID catalogue's resolution
  (navarch.report.xid: 79 RESTART_BM -> a reboot may cure, a GPU reset rarely; 48 and 95
  RESET_GPU -> a reset or a reboot may cure; 64 a row-remap failure -> RMA, never cured in
  place; thermal (the thermal interface) -> hardware, never cured). The per-rung odds are
  an assumption scaled so the cause mix cures 0.33 of GPU faults on the default ladder's
  reboot (see CURES; tests/simulate recomputes the pooled share from the two tables).
- Lemons: RSC-1 (Kokolis et al. 2024) found lemon nodes, repeat offenders, about 1.2 % of
  the fleet; their 20x rate is an assumption (a lemon fails about monthly at 3.8e-3).
- Boot: EC2 launch to running takes tens of seconds for on-demand types (M. Sweet, "EC2
  Launch Times", 2023: LAUNCH_S); an 8-GPU host's POST, NVIDIA driver and fabric manager
  start, and cloud-init installing the agent take minutes, the same on a reboot; no launch
  figure for an 8-GPU type was found ("GPU instance types often take much longer to boot
  within EC2", awslabs/amazon-eks-ami issue 1099). The boot's median follows NVIDIA's GPU
  Operator maintainers: "on node reboot, it takes around 3-5 minutes for the GPU stack to
  be ready" (NVIDIA/gpu-operator issue 707); its spread is an assumption: a lognormal
  boot with a median of 5 min and sigma 0.3 (BOOT_MEDIAN_S, BOOT_SIGMA: p95 8.2 min, p99.9 12.7 min), a tail
  the published bounds point to (Kubernetes' cluster autoscaler: a GPU node "can take up
  to 15 minutes before it reports that GPU is allocatable", kubernetes/autoscaler
  cluster-autoscaler/utils/gpu/gpu.go). A scenario's boot_time min/max draws uniformly
  instead (BOOT_S, the earlier 3-7 min assumption).
- Launches that never boot: an assumption of 1 launch in 200 (NEVER_BOOTS_RATE) whose
  host hangs in its boot on every try (a reboot does not help): no report ever comes,
  and the planner's boot_timeout must replace it. No published rate found.
- Failed launches: an assumption of 2 % per launch (LAUNCH_FAILURE_RATE) that fail at the
  API and are retried by the next run.
- Training (the effective training time ratio of a synchronous job spanning the pool):
  a checkpoint every 30 min and 10 min to restart from it (CHECKPOINT_INTERVAL_S,
  RESTART_S) are assumptions; the Llama 3 report states ">90 % effective training time"
  and ByteRobust (ByteDance, arXiv 2509.16293) 97 % ETTR, the figures to set ours against.
- Event-started runs (off by default): S3 "notifications are delivered in seconds but can
  sometimes take a minute or longer" (Amazon S3 User Guide, "Amazon S3 Event
  Notifications"); the lognormal delivery delay with a median of 2 s and sigma 1.2 (p99
  33 s, p99.9 81 s: EVENT_DELIVERY_*) and the 1 % of events lost (EVENT_LOST_SHARE) are
  assumptions. The run starts once the drain's short poll comes back empty, 2 s after the
  last message (EVENT_POLL_WINDOW_S: navarch.events.runner.drain's settle_s default).
- A dead host in the cloud's status: "Status checks are performed every minute, returning
  a pass or a fail status. [...] If one or more checks fail, the overall status is
  impaired" (Amazon EC2 User Guide, "Status checks for Amazon EC2 instances"), with
  ImpairedSince set to the failed check (DescribeInstanceStatus, InstanceStatusDetails).
  A host dies at a uniform point of its instance's one-minute check grid, so the check
  that fails comes 0-60 s later (IMPAIR_S); no delay between that check and the listing
  is documented, and none is modelled. With events the listing is announced as a cloud
  instance event on the report events' path (EventBridge makes "the first attempt [...]
  as soon as the event arrives", Amazon EventBridge partner FAQ, "What delivery
  guarantees will EventBridge make?"): the same delivery delay and loss (an assumption).
  EC2 sends no state change for a failed status check, so on AWS the event is a
  CloudWatch alarm's on StatusCheckFailed, whose own evaluation delay is not modelled.
- Drains: jobs end terminationGracePeriodSeconds after a cordon (Kubernetes default 30 s;
  Slurm's KillWait default 30 s: DRAIN_GRACE_S); an assumption that one job in five
  checkpoints first, for 1-5 min (CHECKPOINT_*). A job starts on a serving node 30-120 s
  after it serves (assumption: a scheduler's next pass, JOB_START_S).
- False signals (off by default): an agent that crashes and stays silent, a node whose
  writes fail (a partition from the store; the cloud's status stays fine), each for 1-30
  min (SIGNAL_S). No published rate: the scenario's rates are assumptions, there to show
  what a short offline_after costs in wrongful terminations.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from navarch.errors import ConfigError
from navarch.fleet.durations import parse_duration_s
from navarch.fleet.schemas import load_schema

LLAMA3_RATE_PER_NODE_DAY = 3.8e-3
RSC1_RATE_PER_NODE_DAY = 6.5e-3

#: Llama 3 405B's unexpected interruptions by root cause (Meta, "The Llama 3 Herd of Models",
#: 2024, Table 5: counts out of 419), each mapped to what the node's agent would report.
#: The printed percentages are not the counts' shares (faulty GPU 148 is printed 30.1 %,
#: 148 / 419 = 35.3 %): the counts are used. docs/simulate.md has the arithmetic.
LLAMA3_TABLE5_COUNTS: dict[str, tuple[tuple[str, int], ...]] = {
    "xid79": (("Faulty GPU", 148),),
    "hbm_ecc": (("GPU HBM3 Memory", 72),),
    "gpu_lost": (("GPU SRAM Memory", 19),),
    # A GPU system processor (GSP) that stops answering stalls the driver's calls.
    "gpu_hung": (("GPU System Processor", 17),),
    "thermal": (("GPU Thermal Interface + Sensor", 6),),
    "network": (("Network Switch/Cable", 35), ("NIC", 7)),
    "host_down": (("Host Maintenance", 32), ("Power Supply", 3), ("Server Chassis", 2)),
    "host_storage": (("SSD", 3),),
    "pcie": (("IO Expansion Board", 2),),
    "host_cpu": (("CPU", 2),),
    "host_memory": (("System Memory", 2),),
    # Nothing the node shows its agent: a job's own bug, a hang, a wrong result.
    "software": (
        ("Software Bug", 54),
        ("NCCL Watchdog Timeouts", 7),
        ("Silent Data Corruption", 6),
        ("Dependency", 2),
    ),
}
LLAMA3_INTERRUPTIONS = 419

#: The default cause mix: each cause's share of LLAMA3_TABLE5_COUNTS (they sum to 1).
#: nvlink, fabric and clock have no row of their own in Table 5 (NVLink faults are counted
#: under "Faulty GPU"); a scenario's world.causes may give them a weight.
DEFAULT_CAUSES: dict[str, float] = {
    cause: sum(n for _, n in rows) / LLAMA3_INTERRUPTIONS
    for cause, rows in LLAMA3_TABLE5_COUNTS.items()
}

#: InfiniBand's share of Crusoe's H200 faults (GTC 2025, as tabled by G. Lockwood,
#: "component reliability": recoverable 4.9 + hardware 12.2 + other 17 = 34.1 %); not the
#: default (the rest of the mix is Llama 3's RoCE cluster): docs/simulate.md shows it as a
#: scenario's `causes: {network: 0.466}`.
CRUSOE_IB_SHARE = 0.341


#: P(the rung cures the fault) by fault ("cause" or "cause:XID"); the rest stay after it.
#: Weighted by DEFAULT_CAUSES' counts (hbm_ecc's three XIDs equally likely), the default
#: ladder's reboot cures (148 * 0.37 + 72 * (0.45 + 0.45 + 0) / 3 + 19 * 0.28 + 17 * 0.2
#: + 6 * 0) / 262 = 0.325 of GPU faults (xid79, hbm_ecc, gpu_lost, gpu_hung, thermal):
#: Crusoe's 19.5 / 61 = 0.32 recoverable. A GPU reset cures less than a reboot of the same
#: fault. Network: Crusoe's "InfiniBand recoverable faults" 4.9 of 34.1 = 0.14 recover in
#: place (by a reboot: a GPU reset leaves the NIC as it was). Host parts (CPU, memory,
#: SSD, IO board) are component failures in Table 5: never cured in place (assumption).
CURES: dict[str, dict[str, float]] = {
    "xid79:79": {"reboot": 0.37, "reset_gpu": 0.12},
    "hbm_ecc:48": {"reboot": 0.45, "reset_gpu": 0.4},
    "hbm_ecc:95": {"reboot": 0.45, "reset_gpu": 0.4},
    "hbm_ecc:64": {"reboot": 0.0, "reset_gpu": 0.0},
    "nvlink": {"reboot": 0.37, "reset_gpu": 0.25},
    "gpu_lost": {"reboot": 0.28, "reset_gpu": 0.16},
    "gpu_hung": {"reboot": 0.2, "reset_gpu": 0.12},
    "thermal": {"reboot": 0.0, "reset_gpu": 0.0},
    "network": {"reboot": 0.14, "reset_gpu": 0.0},
    "fabric": {"reboot": 0.37, "reset_gpu": 0.25},
    "host_cpu": {"reboot": 0.0, "reset_gpu": 0.0},
    "host_memory": {"reboot": 0.0, "reset_gpu": 0.0},
    "host_storage": {"reboot": 0.0, "reset_gpu": 0.0},
    "pcie": {"reboot": 0.0, "reset_gpu": 0.0},
    "clock": {"reboot": 0.9, "reset_gpu": 0.0},
}
LEMON_FRACTION = 0.012
LEMON_MULTIPLIER = 20.0
LAUNCH_S = (30, 90)
BOOT_S = (180, 420)
BOOT_MEDIAN_S = 300
BOOT_SIGMA = 0.3
NEVER_BOOTS_RATE = 0.005
LAUNCH_FAILURE_RATE = 0.02
IMPAIR_S = (0, 60)
DRAIN_GRACE_S = 30
CHECKPOINT_FRACTION = 0.2
CHECKPOINT_S = (60, 300)
JOB_START_S = (30, 120)
SIGNAL_S = (60, 1800)
CHECKPOINT_INTERVAL_S = 1800
RESTART_S = 600
EVENT_DELIVERY_MEDIAN_S = 2
EVENT_DELIVERY_SIGMA = 1.2
EVENT_POLL_WINDOW_S = 2
EVENT_LOST_SHARE = 0.01


@dataclass(frozen=True)
class Window:
    """An event in time: start at_s after the start, for for_s; optional zone/type."""

    at_s: int
    for_s: int
    zone: str = ""
    instance_type: str = ""
    nodes: int = 0


@dataclass(frozen=True)
class EventPath:
    """Event-started runs (the scenario's `events:`): a report write that changed the
    report reaches the reconciler after a lognormal delivery delay (median, sigma); the
    drain polls on while messages come less than poll_window_s apart, and one run covers
    them; a lost_share of events never arrives (the periodic runs remain). Seconds."""

    delivery_median_s: float = EVENT_DELIVERY_MEDIAN_S
    delivery_sigma: float = EVENT_DELIVERY_SIGMA
    poll_window_s: float = EVENT_POLL_WINDOW_S
    lost_share: float = EVENT_LOST_SHARE


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
    heartbeat_s: int = 300
    cures: dict[str, dict[str, float]] = field(default_factory=dict)
    launch_min_s: int = LAUNCH_S[0]
    launch_max_s: int = LAUNCH_S[1]
    launch_failure_rate: float = LAUNCH_FAILURE_RATE
    impair_min_s: int = IMPAIR_S[0]
    impair_max_s: int = IMPAIR_S[1]
    drain_grace_s: int = DRAIN_GRACE_S
    checkpoint_fraction: float = CHECKPOINT_FRACTION
    checkpoint_min_s: int = CHECKPOINT_S[0]
    checkpoint_max_s: int = CHECKPOINT_S[1]
    job_start_min_s: int = JOB_START_S[0]
    job_start_max_s: int = JOB_START_S[1]
    agent_crashes_per_node_day: float = 0.0
    cut_offs_per_node_day: float = 0.0
    signal_min_s: int = SIGNAL_S[0]
    signal_max_s: int = SIGNAL_S[1]
    boot_median_s: int = BOOT_MEDIAN_S
    boot_sigma: float = BOOT_SIGMA  # 0: uniform over boot_min_s..boot_max_s
    never_boots_rate: float = NEVER_BOOTS_RATE
    training_checkpoint_interval_s: int = CHECKPOINT_INTERVAL_S
    training_restart_s: int = RESTART_S
    events: EventPath | None = None  # None: periodic runs only
    pool_overrides: dict[str, Any] = field(default_factory=dict)  # the scenario's `pool:`
    doa_rate: float = 0.0  # share of arrivals with a latent fault (navarch.simulate.acceptance)

    @property
    def ticks(self) -> int:
        """How many reconcile ticks a simulation runs: one per period, the first at 0 s."""
        return self.duration_s // self.reconcile_period_s + 1

    def draw_boot_s(self, rng: random.Random) -> float:
        """Seconds from a running instance (or a reboot) to a running agent: lognormal
        (boot_median_s, boot_sigma), or uniform over boot_min_s..boot_max_s when the
        scenario's boot_time gives min/max. Sources: the module docstring."""
        if self.boot_sigma <= 0:
            return rng.uniform(self.boot_min_s, self.boot_max_s)
        return rng.lognormvariate(math.log(self.boot_median_s), self.boot_sigma)


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
    source = Path(path)
    data = _read_scenario(source)
    _check_periods(source, data)
    return Scenario(
        source=source,
        name=data.get("name", source.stem),
        fleet_path=(source.parent / data["fleet"]).resolve(),
        duration_s=parse_duration_s(str(data["duration"])),
        reconcile_period_s=parse_duration_s(str(data.get("reconcile_period", "1m"))),
        agent_period_s=parse_duration_s(str(data.get("agent_period", "30s"))),
        heartbeat_s=parse_duration_s(str(data.get("heartbeat", "5m"))),
        seed=int(data.get("seed", 1)),
        **_world_fields(data.get("world", {})),
        **_team_fields(data),
        prices_usd_per_hour={str(k): float(v) for k, v in data.get("prices", {}).items()},
        asserts=tuple(data.get("assert", [])),
        raw=data,
    )


def _read_scenario(source: Path) -> Any:
    """The scenario file's YAML, valid against schemas/simulate.schema.json."""
    import jsonschema

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
    return data


def _check_periods(source: Path, data: dict[str, Any]) -> None:
    """Refuse a zero or negative duration or period."""
    for key, default in (
        ("duration", None),
        ("reconcile_period", "1m"),
        ("agent_period", "30s"),
        ("heartbeat", "5m"),
    ):
        # The engine divides by each of them: a zero would end in ZeroDivisionError.
        raw = data.get(key, default)
        if raw is not None and parse_duration_s(str(raw)) <= 0:
            raise ConfigError(
                f"{key} must be longer than 0s, got {raw}",
                file=str(source),
                key_path=key,
                hint="use a positive duration such as 5m",
            )


def _world_fields(world: dict[str, Any]) -> dict[str, Any]:
    """The Scenario fields the `world` section sets, each defaulted as docs/simulate.md says."""
    causes = dict(DEFAULT_CAUSES)
    causes.update(world.get("causes", {}))
    lemons = world.get("lemons", {})
    boot = world.get("boot_time", {})
    launch = world.get("launch_time", {})
    impair = world.get("impaired_after", {})
    drain = world.get("drain", {})
    jobs = world.get("job_start", {})
    signals = world.get("false_signals", {})

    def dur(doc: dict[str, Any], key: str, default: int) -> int:
        return parse_duration_s(str(doc[key])) if key in doc else default

    uniform_boot = "min" in boot or "max" in boot
    return {
        "boot_median_s": dur(boot, "median", BOOT_MEDIAN_S),
        "boot_sigma": 0.0 if uniform_boot else float(boot.get("sigma", BOOT_SIGMA)),
        "never_boots_rate": float(world.get("never_boots_rate", NEVER_BOOTS_RATE)),
        "failure_rate_per_node_day": float(
            world.get("failure_rate_per_node_day", LLAMA3_RATE_PER_NODE_DAY)
        ),
        "causes": causes,
        "lemon_fraction": float(lemons.get("fraction", 0.0)),
        "lemon_multiplier": float(lemons.get("multiplier", LEMON_MULTIPLIER)),
        "app_xid_bursts_per_node_day": float(world.get("app_xid_bursts_per_node_day", 0.0)),
        "spot_preemptions_per_node_day": float(world.get("spot_preemptions_per_node_day", 0.0)),
        "cures": {k: dict(v) for k, v in world.get("cures", {}).items()},
        "boot_min_s": dur(boot, "min", BOOT_S[0]),
        "boot_max_s": dur(boot, "max", BOOT_S[1]),
        "launch_min_s": dur(launch, "min", LAUNCH_S[0]),
        "launch_max_s": dur(launch, "max", LAUNCH_S[1]),
        "launch_failure_rate": float(world.get("launch_failure_rate", LAUNCH_FAILURE_RATE)),
        "impair_min_s": dur(impair, "min", IMPAIR_S[0]),
        "impair_max_s": dur(impair, "max", IMPAIR_S[1]),
        "drain_grace_s": dur(drain, "grace", DRAIN_GRACE_S),
        "checkpoint_fraction": float(drain.get("checkpoint_fraction", CHECKPOINT_FRACTION)),
        "checkpoint_min_s": dur(drain, "checkpoint_min", CHECKPOINT_S[0]),
        "checkpoint_max_s": dur(drain, "checkpoint_max", CHECKPOINT_S[1]),
        "job_start_min_s": dur(jobs, "min", JOB_START_S[0]),
        "job_start_max_s": dur(jobs, "max", JOB_START_S[1]),
        "agent_crashes_per_node_day": float(signals.get("agent_crashes_per_node_day", 0.0)),
        "cut_offs_per_node_day": float(signals.get("cut_offs_per_node_day", 0.0)),
        "signal_min_s": dur(signals, "min", SIGNAL_S[0]),
        "signal_max_s": dur(signals, "max", SIGNAL_S[1]),
        "api_error_rate": float(world.get("api_error_rate", 0.0)),
        "zone_outages": _windows(world.get("zone_outages", [])),
        "rack_failures": _windows(world.get("rack_failures", [])),
        "stockouts": _windows(world.get("stockouts", [])),
        "agent_outages": _windows(world.get("agent_outages", [])),
        "store_outages": _windows(world.get("store_outages", [])),
        "doa_rate": float(world.get("doa_rate", 0.0)),
    }


def _team_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The Scenario fields of what runs on the fleet and how it is run: `training`,
    `events` and `pool` (overrides of every pool's fleet settings), defaulted as
    docs/simulate.md says."""
    training = data.get("training", {})
    events = data.get("events")
    fields: dict[str, Any] = {
        "training_checkpoint_interval_s": parse_duration_s(
            str(training.get("checkpoint_interval", f"{CHECKPOINT_INTERVAL_S}s"))
        ),
        "training_restart_s": parse_duration_s(str(training.get("restart", f"{RESTART_S}s"))),
        "pool_overrides": dict(data.get("pool", {})),
    }
    if events is not None:
        delivery = events.get("delivery", {})
        fields["events"] = EventPath(
            delivery_median_s=float(
                parse_duration_s(str(delivery.get("median", f"{EVENT_DELIVERY_MEDIAN_S}s")))
            ),
            delivery_sigma=float(delivery.get("sigma", EVENT_DELIVERY_SIGMA)),
            poll_window_s=float(
                parse_duration_s(str(events.get("poll_window", f"{EVENT_POLL_WINDOW_S}s")))
            ),
            lost_share=float(events.get("lost_share", EVENT_LOST_SHARE)),
        )
    return fields
