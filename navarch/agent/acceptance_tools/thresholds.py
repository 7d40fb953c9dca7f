"""Thresholds of the acceptance tests: published per-instance-type baselines, and which floor
a test uses.

A floor comes from, in order: the pool's own (``AcceptancePolicy.*_min_gbps``,
``expected_*``), then the baseline NVIDIA or the cloud publishes for the node's instance
type (``BASELINES``, each with its source), else none: the test passes on its figure and the
planner alone compares it with the pool's median (``min_fraction``), since only it sees the
pool. Only baselines read in a source are listed; a type without one is not guessed.

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from navarch.report.acceptance import AcceptancePolicy

__all__ = [
    "BASELINES",
    "DEFAULT_NCCL_MESSAGE_BYTES",
    "MEMORY_TOLERANCE",
    "Baseline",
    "baseline_for",
    "ib_expectation",
    "nccl_floor",
    "nvbandwidth_floors",
]

#: nccl-tests message size when no baseline names one: 1 GiB is past the 256 MB an 8-GPU
#: NVLink all-reduce needs to reach its peak (NCCL maintainer, nccl-tests issue #212) and
#: fits twice in a 24 GB GPU.
DEFAULT_NCCL_MESSAGE_BYTES = 1 << 30

#: The share of the declared memory per GPU a GPU must show: the driver keeps some of the
#: framebuffer (an H100 80GB reports 81,559 MiB of 81,920); a lost memory partition shows
#: far less.
MEMORY_TOLERANCE = 0.95


@dataclass(frozen=True)
class Baseline:
    """What one instance type must reach, with the source of every figure.

    nccl_busbw_gbps: single-node all_reduce_perf average bus bandwidth, GB/s, at
    nccl_message_bytes (the size the source measured at); nvbandwidth_host_gbps: every
    GPU's host-to-device and device-to-host copy-engine bandwidth, GB/s;
    nvbandwidth_d2d_gbps: every GPU pair's device-to-device read bandwidth, GB/s;
    ib_ports / ib_rate_gbps: InfiniBand ports active at that rate (Gb/s). None: not
    published for the type."""

    source: str
    nccl_busbw_gbps: float | None = None
    nccl_message_bytes: int = DEFAULT_NCCL_MESSAGE_BYTES
    nvbandwidth_host_gbps: float | None = None
    nvbandwidth_d2d_gbps: float | None = None
    ib_ports: int | None = None
    ib_rate_gbps: float | None = None


_AZNHC = "Azure/azurehpc-health-checks@0e0a1ac"

#: Published acceptance figures by instance type (the cloud's own health checks).
BASELINES: Mapping[str, Baseline] = {
    "Standard_ND96isr_H100_v5": Baseline(
        source=f"{_AZNHC} conf/nd96isr_h100_v5.conf: check_nccl_allreduce 460.0 1 16G, "
        "check_gpu_bw 48 335, check_hw_ib 400 mlx5_ib0:1..mlx5_ib7:1",
        nccl_busbw_gbps=460.0,
        nccl_message_bytes=16 << 30,
        nvbandwidth_host_gbps=48.0,
        nvbandwidth_d2d_gbps=335.0,
        ib_ports=8,
        ib_rate_gbps=400.0,
    ),
    "Standard_NC80adis_H100_v5": Baseline(
        source=f"{_AZNHC} conf/nc80adis_h100_v5.conf: check_nccl_allreduce 208.0 1 16G",
        nccl_busbw_gbps=208.0,
        nccl_message_bytes=16 << 30,
    ),
}


def baseline_for(policy: AcceptancePolicy) -> Baseline | None:
    """The published baseline of the policy's instance type, or None (exact name match)."""
    return BASELINES.get(policy.instance_type)


def nccl_floor(policy: AcceptancePolicy) -> tuple[float | None, str]:
    """(floor in GB/s or None, where it comes from) for single-node all_reduce_perf."""
    if policy.nccl_min_busbw_gbps is not None:
        return policy.nccl_min_busbw_gbps, "the pool's nccl_min_busbw_gbps"
    base = baseline_for(policy)
    if base is not None and base.nccl_busbw_gbps is not None:
        return base.nccl_busbw_gbps, base.source
    return None, ""


def nvbandwidth_floors(policy: AcceptancePolicy) -> tuple[float | None, float | None, str]:
    """(host<->device floor, device<->device floor, source), GB/s per GPU or GPU pair.
    The pool's nvbandwidth_min_gbps is the host floor (the PCIe path every GPU has);
    the device-to-device floor comes only from a published baseline."""
    base = baseline_for(policy)
    d2d = base.nvbandwidth_d2d_gbps if base is not None else None
    if policy.nvbandwidth_min_gbps is not None:
        return policy.nvbandwidth_min_gbps, d2d, "the pool's nvbandwidth_min_gbps"
    if base is not None:
        return base.nvbandwidth_host_gbps, d2d, base.source
    return None, None, ""


def ib_expectation(policy: AcceptancePolicy) -> tuple[int | None, float | None, str]:
    """(ports expected active, rate in Gb/s, source): the pool's, else the baseline's."""
    base = baseline_for(policy)
    ports = policy.expected_ib_ports
    rate = policy.expected_ib_rate_gbps
    source = "the pool's spec" if ports is not None or rate is not None else ""
    if base is not None:
        if ports is None and base.ib_ports is not None:
            ports, source = base.ib_ports, base.source
        if rate is None and base.ib_rate_gbps is not None:
            rate, source = base.ib_rate_gbps, base.source
    return ports, rate, source
