"""fleet.yaml ``pools[].acceptance``: the defaulted mapping -> AcceptancePolicy.

The schema (schemas/fleet.schema.json ``$defs.acceptance``) says the shape and the
defaults; this module reads the defaulted mapping and refuses what a schema cannot say and
what would otherwise validate, then fail every node's acceptance (replaced at its deadline):
an expected GPU count other than the pool's, a multi-node test no scheduler can launch, a
tool timeout shorter than the dcgmi diag level takes, a deadline shorter than the timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from navarch.errors import ConfigError
from navarch.fleet.durations import format_duration_s, parse_duration_s
from navarch.report.acceptance import DIAG_LEVEL_RUN_S, AcceptancePolicy, DriftPolicy, SuiteDepth

__all__ = ["acceptance_policy"]

_GIB = 1 << 30

_Fail = Callable[[tuple[Any, ...], str, str], ConfigError]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def acceptance_policy(
    name: str,
    raw: Mapping[str, Any],
    gpus_per_node: int,
    fail: _Fail,
    *,
    scheduler: str = "none",
    head_node: str | None = None,
) -> AcceptancePolicy | None:
    """A pool's defaulted ``acceptance`` mapping -> AcceptancePolicy, or None when it is
    not enabled. expected.gpu_count defaults to the pool's gpus_per_node; gpu_memory_gib
    becomes bytes (GiB = 2**30). scheduler, head_node: the pool's ``scheduler`` and
    ``ssh.head_node``, which the multi-node test runs through.

    Raises the ConfigError fail() builds (key path pools.NAME.acceptance.KEY) when
    expected.gpu_count is not gpus_per_node, multi_node is asked of a pool that cannot
    launch it (_check_multi_node), a tool's timeout is shorter than the suite's dcgmi diag
    level takes (DCGM's help text, navarch.report.acceptance.DIAG_LEVEL_RUN_S), or the deadline
    is shorter than one tool's timeout.
    """
    if not raw.get("enabled", False):
        return None
    expected = raw["expected"]
    thresholds = raw["thresholds"]
    if expected.get("gpu_count", gpus_per_node) != gpus_per_node:
        raise fail(
            ("pools", name, "acceptance", "expected", "gpu_count"),
            f"expected.gpu_count {expected['gpu_count']} differs from the pool's gpus_per_node "
            f"{gpus_per_node}: every node of the pool would fail acceptance and be replaced",
            f"remove expected.gpu_count (it defaults to gpus_per_node) or set it to "
            f"{gpus_per_node}",
        )
    if raw["multi_node"]:
        _check_multi_node(name, scheduler, head_node, fail)
    timeout_s = float(parse_duration_s(raw["timeout"]))
    deadline_s = float(parse_duration_s(raw["deadline"]))
    _check_diag_timeout(name, raw, timeout_s, fail)
    if deadline_s < timeout_s:
        raise fail(
            ("pools", name, "acceptance", "deadline"),
            f"deadline {raw['deadline']} is shorter than one tool's timeout {raw['timeout']}:"
            " every acceptance that runs a slow tool would be replaced",
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


def _check_multi_node(name: str, scheduler: str, head_node: str | None, fail: _Fail) -> None:
    """multi_node needs a pool whose scheduler navarch launches the two-node job through:
    Slurm, from its head node (ssh.head_node; navarch.remote.nccl_peer). Elsewhere the
    test never runs or is `unknown` on every node, which ends each acceptance at its deadline."""
    where = ("pools", name, "acceptance", "multi_node")
    if scheduler != "slurm":
        raise fail(
            where,
            f"multi_node needs scheduler: slurm, but the pool's scheduler is {scheduler}: "
            "navarch launches the two-node NCCL test only through Slurm's srun",
            "set scheduler: slurm (with ssh.head_node), or remove multi_node",
        )
    if not head_node:
        raise fail(
            where,
            "multi_node runs the two-node NCCL test on the Slurm head node, but the pool "
            "sets no ssh.head_node: the test would be unknown on every node",
            f"set pools.{name}.ssh.head_node to the host that runs srun, or remove multi_node",
        )


def _check_diag_timeout(name: str, raw: Mapping[str, Any], timeout_s: float, fail: _Fail) -> None:
    """A tool timeout under the time dcgmi diag takes at the suite's level (deep: at least
    level 3) makes dcgm_diag `unknown` on every node (DIAG_LEVEL_RUN_S, DCGM's help text)."""
    level = AcceptancePolicy(
        depth=SuiteDepth(raw["depth"]), dcgm_diag_level=int(raw["dcgm_diag_level"])
    ).diag_level()
    needed_s = DIAG_LEVEL_RUN_S.get(level, 0)
    if timeout_s >= needed_s:
        return
    suite = f"the {raw['depth']} suite runs dcgmi diag at level {level}"
    raise fail(
        ("pools", name, "acceptance", "timeout"),
        f"timeout {raw['timeout']} is shorter than dcgmi diag level {level} takes (about "
        f"{format_duration_s(needed_s)}, DCGM's help text): {suite}, which would be unknown "
        "on every node and each acceptance replaced at its deadline",
        f"set timeout to at least {format_duration_s(needed_s)} (and deadline above it), "
        "or use depth: quick with a lower dcgm_diag_level",
    )
