"""The pool's baseline of acceptance bandwidths, and which self-reported figures may count. Pure.

The bandwidth of a node in acceptance (NCCL all-reduce bus bandwidth, nvbandwidth host<->device,
the multi-node NCCL figure) is compared with its pool's serving nodes, because fleet
operators find a slow GPU or link only among neighbours. Every figure in that comparison is
what a node says about itself, so one node must never set the bar for another:

- a figure above the published ceiling of the node's GPU (``ceiling_gbps``; the cloud's
  instance type, never the node's word, says which GPU) is implausible: it is not counted,
  the test reads ``unknown`` on a node in acceptance, and a serving node that reported it is
  flagged (named in status and the plan's notes);
- the relative comparison runs only with at least ``MIN_PEERS`` plausible figures, against
  ``robust_baseline`` (a median after dropping figures outside a MAD band), so one forged
  or broken peer moves nothing;
- ``BASELINE_SUSPECT_AFTER`` new nodes in a row below the same baseline make the baseline,
  not the nodes, the suspect: acceptance replacements stop for the pool and a person is told.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from navarch.report.acceptance import AcceptanceTest

__all__ = [
    "ANY_GPU",
    "BASELINE_SUSPECT_AFTER",
    "GPU_CEILINGS",
    "INSTANCE_GPUS",
    "MAD_BAND",
    "MIN_PEERS",
    "Ceiling",
    "ceiling_gbps",
    "robust_baseline",
]

#: Plausible serving figures a relative comparison needs: with two, one forged figure is
#: half the evidence and sets any median; with three, the MAD band can outvote it.
MIN_PEERS = 3

#: Figures further than this many scaled MADs from the median are left out of the baseline:
#: 3 is the "very conservative" cut of Leys et al., "Detecting outliers: Do not use
#: standard deviation around the mean, use absolute deviation around the median" (Journal
#: of Experimental Social Psychology 49(4), 2013), the Hampel filter's usual threshold.
MAD_BAND = 3.0

#: The consistency constant that makes the MAD estimate a normal standard deviation.
_MAD_SCALE = 1.4826

#: New nodes failing the relative comparison in a row, against the same baseline, after
#: which the baseline is suspected: one slow node is common, two can be one bad rack, but
#: three fresh machines from the cloud all slow the same way is far likelier a wrong
#: baseline (forged or stale peers), and each further replacement costs a launch.
BASELINE_SUSPECT_AFTER = 3


@dataclass(frozen=True)
class Ceiling:
    """The most one GPU can move, GB/s, with the source of each figure.

    nccl_busbw_gbps: the GPU's total NVLink bandwidth (both directions), above which no
    all-reduce bus bandwidth can be; host_gbps: its host link's total bandwidth, above which
    no nvbandwidth host<->device copy can be."""

    gpu: str
    nccl_busbw_gbps: float
    host_gbps: float
    source: str


_DS = "NVIDIA datasheet"

#: Published peaks per GPU model (interconnect rows of NVIDIA's datasheets).
GPU_CEILINGS: Mapping[str, Ceiling] = {
    "A100 SXM": Ceiling("A100 SXM", 600.0, 64.0, f"{_DS} A100: NVLink 600 GB/s, PCIe Gen4 64 GB/s"),
    "H100 SXM": Ceiling(
        "H100 SXM", 900.0, 128.0, f"{_DS} H100: SXM NVLink 900 GB/s, PCIe Gen5 128 GB/s"
    ),
    "H100 NVL": Ceiling(
        "H100 NVL", 600.0, 128.0, f"{_DS} H100: NVL NVLink 600 GB/s, PCIe Gen5 128 GB/s"
    ),
    "H200 SXM": Ceiling(
        "H200 SXM", 900.0, 128.0, f"{_DS} H200: SXM NVLink 900 GB/s, PCIe Gen5 128 GB/s"
    ),
}

#: Any GPU, for an instance type not in INSTANCE_GPUS: NVLink 5 (B200, 1.8 TB/s per GPU,
#: NVIDIA HGX B200 datasheet) and NVLink-C2C (GH200, 900 GB/s CPU<->GPU, NVIDIA GH200
#: datasheet) are the widest links NVIDIA publishes.
ANY_GPU = Ceiling(
    "any GPU",
    1800.0,
    900.0,
    "NVIDIA HGX B200 datasheet: NVLink 5 1.8 TB/s; GH200 datasheet: NVLink-C2C 900 GB/s",
)

#: The GPU of each instance type, from the clouds' instance type pages (AWS EC2 P4/P5
#: instances, Google Cloud accelerator-optimized machine family, Azure ND-series sizes).
INSTANCE_GPUS: Mapping[str, str] = {
    "p4d.24xlarge": "A100 SXM",
    "p4de.24xlarge": "A100 SXM",
    "p5.48xlarge": "H100 SXM",
    "p5e.48xlarge": "H200 SXM",
    "p5en.48xlarge": "H200 SXM",
    "a2-highgpu-8g": "A100 SXM",
    "a2-ultragpu-8g": "A100 SXM",
    "a3-highgpu-8g": "H100 SXM",
    "a3-megagpu-8g": "H100 SXM",
    "a3-ultragpu-8g": "H200 SXM",
    "Standard_ND96asr_v4": "A100 SXM",
    "Standard_ND96amsr_A100_v4": "A100 SXM",
    "Standard_ND96isr_H100_v5": "H100 SXM",
    "Standard_ND96isr_H200_v5": "H200 SXM",
    "Standard_NC80adis_H100_v5": "H100 NVL",
}


def ceiling_gbps(instance_type: str, test: str) -> tuple[float, str] | None:
    """(the highest plausible figure in GB/s, where it comes from) for a relative test on
    an instance type, or None for a test without a ceiling.

    instance_type: the cloud's listing of the node (never the node's report); a type not
    in INSTANCE_GPUS gets ANY_GPU. NCCL tests are bounded by NVLink, nvbandwidth's figure
    (host<->device) by the host link."""
    c = GPU_CEILINGS.get(INSTANCE_GPUS.get(instance_type, ""), ANY_GPU)
    where = f"{c.gpu}: {c.source}"
    if test in (AcceptanceTest.NCCL_ALL_REDUCE, AcceptanceTest.NCCL_MULTI_NODE):
        return c.nccl_busbw_gbps, where
    if test == AcceptanceTest.NVBANDWIDTH:
        return c.host_gbps, where
    return None


def robust_baseline(figures: Sequence[float]) -> float | None:
    """The pool's baseline of one test from its serving nodes' plausible figures (GB/s),
    or None with fewer than MIN_PEERS.

    The median of the figures within MAD_BAND scaled median absolute deviations of the
    median (when every figure but the outliers is equal, the MAD is 0 and only those
    equal figures are kept). Why not the plain median: with three or four peers one forged
    and one slow figure already move it; a MAD band drops both while leaving a pool whose
    figures spread evenly untouched."""
    if len(figures) < MIN_PEERS:
        return None
    mid = statistics.median(figures)
    mad = _MAD_SCALE * statistics.median(abs(f - mid) for f in figures)
    kept = [f for f in figures if abs(f - mid) <= MAD_BAND * mad]
    return statistics.median(kept) if kept else mid
