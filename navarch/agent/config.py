"""Agent configuration: ``/etc/navarch/agent.yaml`` (or ``--config PATH``), or built in Python.

Example (what templates/cloud-init.yaml.j2 writes)::

    fleet: demo
    pool: train
    node: train-0001
    instance_id: i-0abc
    store: s3://bucket/prefix
    key: 5f0c...            # hex node key (or key_file: /etc/navarch/node.key)
    gpus_per_node: 8
    state_file: /var/lib/navarch/agent-state.json
    kernel_log: null        # a text file instead of journald / /dev/kmsg
    sysfs_root: null        # where PCIe AER counters are read (default /sys; fake backend: none)
    fake_gpu: false
    gpu_count: null         # fake backend only (default: NAVARCH_GPU_COUNT, gpus_per_node, 8)
    faults_file: null       # fake backend only (default: NAVARCH_FAKE_GPU_FAULTS)
    boot_id: null           # default: /proc/sys/kernel/random/boot_id
    metadata: auto          # auto | aws | gcp | azure | none
    metadata_endpoint: null # base URL override (tests)
    notice_file: null       # a JSON notice {"kind", "source", "deadline", "detail"} (local provider)
    plugin_check_timeout_s: 30   # per navarch.checks plugin; past it, that check is degraded
    nvml_call_timeout_s: 10 # per NVML call; past it the call is reported as gpu_hung
    nvml_budget_s: 45       # all NVML calls of one run together (docs/agent.md, Deadlines)
    heartbeat_s: 300        # an unchanged report is written again after this long (see below)
    network: null           # the pool's health.network: {ports: 8, rate_gbps: 400} (navarch.agent.network)
    infiniband_dir: null    # default /sys/class/infiniband (none read by the fake backend)
    acceptance: null        # the pool's acceptance suite (navarch.report.acceptance.policy_to_mapping)
    acceptance_file: null   # fake backend only: the tools' answers (navarch local inject --acceptance)

The agent checks every timer interval (30 s by default) and writes its report at once when
the verdict, the fault set or the GPU-process state changed, and otherwise every
``heartbeat_s`` (the kubelet's node status: computed every 10 s, posted on change or every
5 minutes). ``heartbeat_s: 0`` writes every check.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.agent.bootstrap import DEFAULT_STATE_FILE
from navarch.errors import ConfigError
from navarch.report.acceptance import AcceptancePolicy, policy_from_mapping

if TYPE_CHECKING:
    from navarch.agent.network import NetworkExpectation

__all__ = ["AgentConfig", "load_config", "DEFAULT_CONFIG_PATH", "METADATA_KINDS"]

DEFAULT_CONFIG_PATH = "/etc/navarch/agent.yaml"
METADATA_KINDS = ("auto", "aws", "gcp", "azure", "none")
_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_CLOUD_INIT_INSTANCE_ID = "/var/lib/cloud/data/instance-id"


@dataclass(frozen=True)
class AgentConfig:
    """Everything one agent run needs. Construct directly or with ``load_config``.

    store: object store URL (file://DIR, s3://bucket/prefix, gs://bucket/prefix).
    key: the node key as hex (64 hex chars for the 32-byte derive_node_key output);
    key_file: a file holding the hex key (used when key is not set).
    metadata_timeout_s: per request, for the link-local metadata endpoints.
    """

    fleet: str
    pool: str
    node: str
    store: str
    instance_id: str = ""
    key: str | None = None
    key_file: str | None = None
    gpus_per_node: int | None = None
    state_file: str = DEFAULT_STATE_FILE
    kernel_log: str | None = None
    #: the sysfs whose bus/pci/devices/*/aer_dev_* are read; None: /sys, or none on the fake
    #: backend (a laptop's own PCIe is not the simulated node's)
    sysfs_root: str | None = None
    fake_gpu: bool = False
    gpu_count: int | None = None
    faults_file: str | None = None
    boot_id: str | None = None
    metadata: str = "auto"
    metadata_endpoint: str | None = None
    metadata_timeout_s: float = 0.3
    notice_file: str | None = None
    plugin_check_timeout_s: float = 30.0
    #: each NVML call's deadline and all calls' together (navarch.agent.deadline)
    nvml_call_timeout_s: float = 10.0
    nvml_budget_s: float = 45.0
    heartbeat_s: float = 300.0
    #: acceptance: the pool's acceptance suite, run once per boot (navarch.agent.acceptance); None: none
    acceptance: AcceptancePolicy | None = None
    #: fake backend only: a JSON object of the acceptance tools' answers (acceptance.load_overrides)
    acceptance_file: str | None = None
    #: the RDMA ports the pool expects (health.network); None: the acceptance expectation, if any
    network: NetworkExpectation | None = None
    #: the sysfs class directory of RDMA devices; None: /sys/class/infiniband on a real
    #: node, none read under the fake backend (a laptop's ports are not the simulated node's)
    infiniband_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("fleet", "pool", "node", "store"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{name} must be a non-empty string", key_path=name)
        if self.metadata not in METADATA_KINDS:
            raise ConfigError(
                f"metadata must be one of {', '.join(METADATA_KINDS)}", key_path="metadata"
            )
        if self.gpus_per_node is not None and (
            not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 0
        ):
            raise ConfigError(
                "gpus_per_node must be a non-negative integer", key_path="gpus_per_node"
            )
        for name in ("nvml_call_timeout_s", "nvml_budget_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and 0 < value <= 600
            ):
                raise ConfigError(f"{name} must be a number of seconds 0-600", key_path=name)
        if isinstance(self.heartbeat_s, bool) or not (
            isinstance(self.heartbeat_s, (int, float)) and 0 <= self.heartbeat_s <= 86400
        ):
            raise ConfigError(
                "heartbeat_s must be a number of seconds 0-86400", key_path="heartbeat_s"
            )
        if self.gpu_count is not None and (
            not isinstance(self.gpu_count, int) or not 0 <= self.gpu_count <= 64
        ):
            raise ConfigError("gpu_count must be an integer 0-64", key_path="gpu_count")

    @property
    def report_key(self) -> str:
        """Store key of this node's report: health/<fleet>/<pool>/<node>.json."""
        return f"health/{self.fleet}/{self.pool}/{self.node}.json"

    def node_key(self) -> bytes:
        """The node's HMAC key bytes from ``key`` (hex) or ``key_file`` (hex text).

        Raises ConfigError when neither is set, the file cannot be read, or it is not hex.
        """
        text = self.key
        where = "key"
        if not text and self.key_file:
            where = "key_file"
            try:
                text = Path(self.key_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read node key: {exc}", file=self.key_file, key_path="key_file"
                ) from exc
        if not text:
            raise ConfigError("no node key: set key (hex) or key_file", key_path="key")
        try:
            key = bytes.fromhex(text.strip())
        except ValueError as exc:
            raise ConfigError("node key is not hex", key_path=where) from exc
        if len(key) < 16:
            raise ConfigError("node key is shorter than 16 bytes", key_path=where)
        return key

    def fake_gpu_count(self) -> int:
        """GPU count of the fake backend: gpu_count, else NAVARCH_GPU_COUNT, else gpus_per_node, else 8."""
        if self.gpu_count is not None:
            return self.gpu_count
        env = os.environ.get("NAVARCH_GPU_COUNT", "").strip()
        if env:
            try:
                return max(0, min(64, int(env)))
            except ValueError as exc:
                raise ConfigError(f"NAVARCH_GPU_COUNT={env!r} is not an integer") from exc
        return self.gpus_per_node or 8

    def fake_faults_path(self) -> str | None:
        """faults_file, else env NAVARCH_FAKE_GPU_FAULTS, else None."""
        return self.faults_file or os.environ.get("NAVARCH_FAKE_GPU_FAULTS") or None

    def current_instance_id(self) -> str:
        """instance_id, else cloud-init's record of it (/var/lib/cloud/data/instance-id), else ""."""
        if self.instance_id:
            return self.instance_id
        try:
            return Path(_CLOUD_INIT_INSTANCE_ID).read_text().strip()[:128]
        except OSError:
            return ""

    def current_boot_id(self) -> str:
        """boot_id override, else the kernel's boot id, else "unknown"."""
        if self.boot_id:
            return self.boot_id
        try:
            return Path(_BOOT_ID_PATH).read_text().strip() or "unknown"
        except OSError:
            return "unknown"


_FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}
_TYPES: dict[str, tuple[type, ...]] = {
    "gpus_per_node": (int,),
    "gpu_count": (int,),
    "fake_gpu": (bool,),
    "metadata_timeout_s": (int, float),
    "plugin_check_timeout_s": (int, float),
    "nvml_call_timeout_s": (int, float),
    "nvml_budget_s": (int, float),
    "heartbeat_s": (int, float),
    "acceptance": (dict,),
    "network": (dict,),
}


def load_config(
    path: str | os.PathLike[str] = DEFAULT_CONFIG_PATH, **overrides: Any
) -> AgentConfig:
    """Load AgentConfig from a YAML file; keyword overrides win (None values are ignored).

    Raises ConfigError for a missing/unreadable file, bad YAML (with line), an unknown
    key, a missing required key, or a value of the wrong type.
    """
    import yaml

    p = str(path)
    try:
        text = Path(p).read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read agent config: {exc.strerror or exc}",
            file=p,
            hint="write it with cloud-init or pass --config PATH",
        ) from exc
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            f"invalid YAML: {getattr(exc, 'problem', exc)}",
            file=p,
            line=mark.line + 1 if mark else None,
        ) from exc
    if not isinstance(doc, dict):
        raise ConfigError("top level must be a mapping", file=p)
    doc.update({k: v for k, v in overrides.items() if v is not None})
    for key, value in doc.items():
        if key not in _FIELDS:
            raise ConfigError(
                f"unknown key {key!r}",
                file=p,
                key_path=str(key),
                hint=f"known keys: {', '.join(sorted(_FIELDS))}",
            )
        if value is None:
            continue
        expected = _TYPES.get(key, (str,))
        if not isinstance(value, expected) or (bool not in expected and isinstance(value, bool)):
            raise ConfigError(
                f"expected {' or '.join(t.__name__ for t in expected)}, got {type(value).__name__}",
                file=p,
                key_path=str(key),
            )
    missing = [name for name in ("fleet", "pool", "node", "store") if not doc.get(name)]
    if missing:
        raise ConfigError(
            f"missing required key(s): {', '.join(missing)}", file=p, key_path=missing[0]
        )
    clean = {k: v for k, v in doc.items() if v is not None}
    if "acceptance" in clean:
        clean["acceptance"] = policy_from_mapping(clean["acceptance"], file=p)
    if "network" in clean:
        clean["network"] = _network_from_mapping(clean["network"], p)
    try:
        return AgentConfig(**clean)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=p, key_path=exc.key_path, hint=exc.hint) from exc


def _network_from_mapping(doc: dict[str, Any], path: str) -> NetworkExpectation:
    """agent.yaml ``network`` ({ports: int, rate_gbps: number}, both optional) as a
    NetworkExpectation. Raises ConfigError naming the key when a value is of the wrong
    type or out of range (ports 0-64, rate above 0)."""
    from navarch.agent.network import NetworkExpectation

    unknown = sorted(set(doc) - {"ports", "rate_gbps"})
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}",
            file=path,
            key_path=f"network.{unknown[0]}",
            hint="network takes ports and rate_gbps",
        )
    ports = doc.get("ports")
    if ports is not None and (
        isinstance(ports, bool) or not isinstance(ports, int) or not 0 <= ports <= 64
    ):
        raise ConfigError("ports must be an integer 0-64", file=path, key_path="network.ports")
    rate = doc.get("rate_gbps")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0
    ):
        raise ConfigError(
            "rate_gbps must be a number above 0", file=path, key_path="network.rate_gbps"
        )
    return NetworkExpectation(
        ports, None if rate is None else float(rate), "the pool's health.network"
    )
