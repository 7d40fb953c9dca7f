"""The acceptance suite's words: what a pool asks of a node before it serves, and what the
node's agent found.

A node that was launched (new, surge, replacement, spare) or returns from an in-place
remedy runs acceptance: it stays cordoned while its agent runs the pool's acceptance suite once
for its boot (and again after a GPU reset) and reports every result in its health report
(``HealthReport.acceptance``). The planner returns it to service only when the run for its
current boot finished and every blocking result passed; a failure replaces it (dead on
arrival). ``unknown`` (a tool missing, timed out, or printing what its parser does not
know) is never a pass.

::

    AcceptancePolicy   fleet.yaml ``pools[].acceptance`` (and the agent's config): what to run
                       and the thresholds
    AcceptanceRun      one run of the suite on one boot: results, started/finished
    AcceptanceResult   one test's verdict: figure against threshold, tool version, reason

This module is shipped to GPU nodes in the agent bundle (Python 3.9, standard library
and navarch's bundled modules only): no ``match``, no ``X | Y`` outside annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from navarch.errors import ConfigError
from navarch.report.compat import StrEnum

__all__ = [
    "policy_from_mapping",
    "policy_to_mapping",
    "AcceptancePolicy",
    "AcceptanceResult",
    "AcceptanceRun",
    "AcceptanceStatus",
    "AcceptanceTest",
    "DEEP_DIAG_LEVEL",
    "DIAG_LEVEL_RUN_S",
    "DriftPolicy",
    "FINDING_DETAIL",
    "Finding",
    "SuiteDepth",
    "finding_of",
]


class AcceptanceStatus(StrEnum):
    """One test's verdict. ``unknown`` never counts as a pass (docs/design.md, Safety rules, rule 2:
    doubt never acts, so a node in doubt does not serve either)."""

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


class AcceptanceTest(StrEnum):
    """The built-in tests (a check plugin may report others under its own name)."""

    GPU_COUNT = "gpu_count"  # GPUs the driver sees vs the pool's spec
    GPU_MEMORY = "gpu_memory"  # memory per GPU vs the spec
    PCIE_LINK = "pcie_link"  # current PCIe generation and width at their maximum
    NVLINK = "nvlink"  # NVLink links active
    IB_PORTS = "ib_ports"  # InfiniBand/EFA ports active at their rated speed (sysfs)
    ECC_MODE = "ecc_mode"  # ECC enabled on every GPU
    PERSISTENCE_MODE = "persistence_mode"
    VERSIONS = "versions"  # driver, CUDA, VBIOS, InfoROM, NIC firmware vs the baseline
    DCGM_DIAG = "dcgm_diag"  # dcgmi diag -r LEVEL -j
    NVBANDWIDTH = "nvbandwidth"  # host<->device and device<->device copy bandwidth
    NCCL_ALL_REDUCE = "nccl_all_reduce"  # single-node all_reduce_perf bus bandwidth
    NCCL_MULTI_NODE = "nccl_multi_node"  # all_reduce_perf with a known-good peer


class Finding(StrEnum):
    """What a failed result is about. ``hardware``: the node (replaced, dead on arrival);
    ``setting``: a setting of the image (persistence mode, ECC mode, what DCGM files as a
    configuration error); ``drift``: a version different from the pool's baseline. A
    setting or drift is the same on every node launched from the image, so replacing the
    node cannot cure it: the planner holds the node and tells a person once per pool."""

    HARDWARE = "hardware"
    SETTING = "setting"
    DRIFT = "drift"


#: The result detail key where a tool that can tell (dcgmi diag, by DCGM's own error
#: category) names a failure's Finding.
FINDING_DETAIL = "finding"


class SuiteDepth(StrEnum):
    """``quick`` (the default: inventory, versions, dcgmi diag level 1, nvbandwidth, NCCL
    single node; minutes) or ``deep`` (dcgmi diag at the pool's deeper level, longer
    bandwidth runs)."""

    QUICK = "quick"
    DEEP = "deep"


#: dcgmi diag level of the deep suite: level 3 adds the stress, power, memory bandwidth and
#: NVLink tests (DCGM dcgmi/CommandLineParser.cpp help: "long", "~ 15 minutes").
DEEP_DIAG_LEVEL = 3

#: How long one dcgmi diag run takes per level, in seconds, as DCGM's own help text gives it
#: (dcgmi/CommandLineParser.cpp, the `dcgmi diag` page of the DCGM documentation): level 1
#: "~ seconds" (no floor), level 2 "~ 2 minutes", level 3 "~ 15 minutes". A tool timeout
#: under this makes the run `unknown` on every node.
DIAG_LEVEL_RUN_S = {1: 0, 2: 120, 3: 900}


class DriftPolicy(StrEnum):
    """What a version that differs from the pool's baseline does: ``block`` (the node fails
    acceptance) or ``warn`` (a finding; the node serves)."""

    BLOCK = "block"
    WARN = "warn"


@dataclass(frozen=True)
class AcceptancePolicy:
    """A pool's acceptance suite (fleet.yaml ``pools[].acceptance``), as the agent receives it.

    expected_*: the pool's spec (None: not checked); versions: the baseline by component
    (e.g. {"driver": "550.54.15"}; empty: the majority of the pool's serving nodes, which
    the planner compares); *_min_gbps: absolute floors in GB/s (None: relative only);
    min_fraction: a node below this share of the pool's median figure is flagged;
    timeout_s: per tool; deadline_s: the whole acceptance, judged by the planner.
    """

    enabled: bool = True
    depth: SuiteDepth = SuiteDepth.QUICK
    dcgm_diag_level: int = 1
    expected_gpu_count: int | None = None
    expected_gpu_memory_bytes: int | None = None
    expected_pcie_gen: int | None = None
    expected_pcie_width: int | None = None
    expected_nvlink_links: int | None = None
    expected_ib_ports: int | None = None
    expected_ib_rate_gbps: float | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    drift: DriftPolicy = DriftPolicy.BLOCK
    nccl_min_busbw_gbps: float | None = None
    nvbandwidth_min_gbps: float | None = None
    min_fraction: float = 0.8
    multi_node: bool = False
    timeout_s: float = 600.0
    # The node's instance type ("" unknown): selects the published per-type baselines
    # (navarch.agent.acceptance_tools.thresholds) where no absolute floor is declared.
    instance_type: str = ""
    # Floor of the multi-node all_reduce_perf with a known-good peer, GB/s (None: relative
    # to the pool's median only); a two-node figure is far below a one-node one.
    nccl_multi_node_min_busbw_gbps: float | None = None
    #: how long after the run started the planner holds a node that has not passed before
    #: it replaces it (seconds)
    deadline_s: float = 1800.0

    def diag_level(self) -> int:
        """The dcgmi diag level this policy runs: its own for quick, at least
        DEEP_DIAG_LEVEL for deep."""
        if self.depth is SuiteDepth.DEEP:
            return max(self.dcgm_diag_level, DEEP_DIAG_LEVEL)
        return self.dcgm_diag_level


@dataclass(frozen=True)
class AcceptanceResult:
    """One test's verdict. figure/threshold: in ``unit`` (e.g. "GB/s", "GPUs", "lanes");
    tool_version: the tool's own version text ("" when not read); reason: why, in one line
    (capped by the agent; hostile text to the reconciler, navarch.textsafe);
    detail: the figures behind it by name (e.g. {"driver": "550.54.14"})."""

    test: str
    status: AcceptanceStatus
    figure: float | None = None
    threshold: float | None = None
    unit: str = ""
    tool_version: str = ""
    reason: str = ""
    duration_s: float | None = None
    detail: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the health report's ``acceptance.results[]``."""
        return {
            "test": self.test,
            "status": self.status.value,
            "figure": self.figure,
            "threshold": self.threshold,
            "unit": self.unit,
            "tool_version": self.tool_version,
            "reason": self.reason,
            "duration_s": self.duration_s,
            "detail": dict(self.detail),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AcceptanceResult:
        """Inverse of to_json; raises KeyError, TypeError or ValueError on a bad document."""
        return cls(
            test=str(doc["test"]),
            status=AcceptanceStatus(doc["status"]),
            figure=None if doc.get("figure") is None else float(doc["figure"]),
            threshold=None if doc.get("threshold") is None else float(doc["threshold"]),
            unit=str(doc.get("unit", "")),
            tool_version=str(doc.get("tool_version", "")),
            reason=str(doc.get("reason", "")),
            duration_s=None if doc.get("duration_s") is None else float(doc["duration_s"]),
            detail={str(k): str(v) for k, v in dict(doc.get("detail") or {}).items()},
        )


@dataclass(frozen=True)
class AcceptanceRun:
    """One run of the suite on one boot (boot_id; reset: the GPU-reset generation within
    the boot, 0 before any). finished_at None: still running. Times are RFC 3339 UTC by
    the node's clock."""

    boot_id: str
    depth: SuiteDepth
    started_at: str
    finished_at: str | None = None
    reset: int = 0
    results: tuple[AcceptanceResult, ...] = ()

    @property
    def passed(self) -> bool:
        """Finished, with at least one result, and every result a pass."""
        return (
            self.finished_at is not None
            and bool(self.results)
            and all(r.status is AcceptanceStatus.PASS for r in self.results)
        )

    def failures(self) -> tuple[AcceptanceResult, ...]:
        """The results that are not a pass (fail and unknown), in run order."""
        return tuple(r for r in self.results if r.status is not AcceptanceStatus.PASS)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the health report's ``acceptance``."""
        return {
            "boot_id": self.boot_id,
            "depth": self.depth.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "reset": self.reset,
            "results": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AcceptanceRun:
        """Inverse of to_json; raises KeyError, TypeError or ValueError on a bad document."""
        return cls(
            boot_id=str(doc["boot_id"]),
            depth=SuiteDepth(doc["depth"]),
            started_at=str(doc["started_at"]),
            finished_at=None if doc.get("finished_at") is None else str(doc["finished_at"]),
            reset=int(doc.get("reset", 0)),
            results=tuple(AcceptanceResult.from_json(r) for r in doc.get("results") or ()),
        )


#: Tests whose failure is a setting or drift by what they check.
_TEST_FINDINGS = {
    AcceptanceTest.PERSISTENCE_MODE.value: Finding.SETTING,
    AcceptanceTest.ECC_MODE.value: Finding.SETTING,
    AcceptanceTest.VERSIONS.value: Finding.DRIFT,
}


def finding_of(result: AcceptanceResult) -> Finding:
    """What a failed result is about: by its test (``_TEST_FINDINGS``), else the setting
    the dcgm_diag result names in its detail (``FINDING_DETAIL``), else hardware. Anything
    not known to be a setting is hardware, as before this distinction existed."""
    by_test = _TEST_FINDINGS.get(result.test)
    if by_test is not None:
        return by_test
    if (
        result.test == AcceptanceTest.DCGM_DIAG.value
        and result.detail.get(FINDING_DETAIL) == Finding.SETTING.value
    ):
        return Finding.SETTING
    return Finding.HARDWARE


# --- the policy as agent.yaml holds it (written by the bootstrap, read by the agent) ------


def policy_to_mapping(policy: AcceptancePolicy) -> dict[str, Any]:
    """The policy as agent.yaml's ``acceptance:`` mapping (field names, enums by value)."""
    out: dict[str, Any] = {}
    for f in fields(policy):
        value = getattr(policy, f.name)
        if isinstance(value, (SuiteDepth, DriftPolicy)):
            value = value.value
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def policy_from_mapping(doc: Any, file: str | None = None) -> AcceptancePolicy:
    """agent.yaml's ``acceptance:`` mapping -> AcceptancePolicy (missing keys: defaults).

    Raises ConfigError naming ``acceptance.KEY`` for an unknown key or a bad value.
    """
    if not isinstance(doc, Mapping):
        raise ConfigError("acceptance must be a mapping", file=file, key_path="acceptance")
    known = {f.name for f in fields(AcceptancePolicy)}
    kwargs: dict[str, Any] = {}
    for key, value in doc.items():
        where = f"acceptance.{key}"
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r}",
                file=file,
                key_path=where,
                hint=f"known keys: {', '.join(sorted(known))}",
            )
        try:
            if key == "depth":
                value = SuiteDepth(value)
            elif key == "drift":
                value = DriftPolicy(value)
            elif key == "versions":
                value = {str(k): str(v) for k, v in dict(value).items()}
            elif key == "instance_type":
                value = str(value)
            elif key in ("enabled", "multi_node"):
                if not isinstance(value, bool):
                    raise ValueError("expected true or false")
            elif value is not None and key != "dcgm_diag_level" and not key.startswith("expected_"):
                value = float(value)
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError("expected a number")
                value = value if key == "expected_ib_rate_gbps" else int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad value {value!r}: {exc}", file=file, key_path=where) from exc
        kwargs[key] = value
    return AcceptancePolicy(**kwargs)
