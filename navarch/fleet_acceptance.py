"""fleet.yaml ``pools[].acceptance``: the defaulted mapping -> AcceptancePolicy.

The schema (schemas/fleet.schema.json ``$defs.acceptance``) says the shape and the
defaults; this module reads the defaulted mapping and checks what a schema cannot say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from navarch.acceptance import AcceptancePolicy, DriftPolicy, SuiteDepth
from navarch.durations import parse_duration_s
from navarch.errors import ConfigError

__all__ = ["acceptance_policy"]

_GIB = 1 << 30


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def acceptance_policy(
    name: str,
    raw: Mapping[str, Any],
    gpus_per_node: int,
    fail: Callable[[tuple[Any, ...], str, str], ConfigError],
) -> AcceptancePolicy | None:
    """A pool's defaulted ``acceptance`` mapping -> AcceptancePolicy, or None when it is
    not enabled. expected.gpu_count defaults to the pool's gpus_per_node; gpu_memory_gib
    becomes bytes (GiB = 2**30). Raises the ConfigError fail() builds (key path
    pools.NAME.acceptance.KEY) when the deadline is shorter than one tool's timeout.
    """
    if not raw.get("enabled", False):
        return None
    expected = raw["expected"]
    thresholds = raw["thresholds"]
    timeout_s = float(parse_duration_s(raw["timeout"]))
    deadline_s = float(parse_duration_s(raw["deadline"]))
    if deadline_s < timeout_s:
        raise fail(
            ("pools", name, "acceptance", "deadline"),
            f"deadline {raw['deadline']} is shorter than one tool's timeout {raw['timeout']}:"
            " every burn-in that runs a slow tool would be replaced",
            "make deadline at least timeout (the defaults are 30m and 10m)",
        )
    memory = expected.get("gpu_memory_gib")
    return AcceptancePolicy(
        enabled=True,
        depth=SuiteDepth(raw["depth"]),
        dcgm_diag_level=int(raw["dcgm_diag_level"]),
        expected_gpu_count=int(expected.get("gpu_count", gpus_per_node)),
        expected_gpu_memory_bytes=None if memory is None else int(float(memory) * _GIB),
        expected_pcie_gen=expected.get("pcie_gen"),
        expected_pcie_width=expected.get("pcie_width"),
        expected_nvlink_links=expected.get("nvlink_links"),
        expected_ib_ports=expected.get("ib_ports"),
        expected_ib_rate_gbps=_opt_float(expected.get("ib_rate_gbps")),
        versions={str(k): str(v) for k, v in sorted(raw["versions"].items())},
        drift=DriftPolicy(raw["drift"]),
        nccl_min_busbw_gbps=_opt_float(thresholds.get("nccl_busbw_gbps")),
        nvbandwidth_min_gbps=_opt_float(thresholds.get("nvbandwidth_gbps")),
        min_fraction=float(raw["min_fraction"]),
        multi_node=bool(raw["multi_node"]),
        nccl_multi_node_min_busbw_gbps=_opt_float(thresholds.get("nccl_multi_node_busbw_gbps")),
        timeout_s=timeout_s,
        deadline_s=deadline_s,
    )
