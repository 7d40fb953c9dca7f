"""Fault latencies by how navarch learns of the fault, so a pooled p95 can be read apart.

A fault's node either reports it (its agent sees an XID, a lost GPU, a link down, a
temperature past shutdown: the report that changes starts a run with events on), or it
cannot: a dead host writes nothing, and navarch learns of it from the cloud's impaired
listing (EC2 status checks run once a minute, Amazon EC2 User Guide, "Status checks for
Amazon EC2 instances") or, failing that, from its missing heartbeat (offline_after). No
store notification announces a write that never happens, so events cannot speed the
second path up: it waits for the next periodic run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from navarch.report.compat import StrEnum

#: The world's causes whose node writes no report (navarch.simulate.world).
SILENT_CAUSES = frozenset({"host_down"})


class Detection(StrEnum):
    """How navarch learns of a fault (the result's ``*_reported_*`` and ``*_dead_host_*``
    keys, serialised by value)."""

    REPORTED = "reported"  # the node's own agent reports it
    DEAD_HOST = "dead_host"  # the cloud's status or the missing heartbeat


def detection(cause: str) -> Detection:
    """The path a fault of this world cause is found by."""
    return Detection.DEAD_HOST if cause in SILENT_CAUSES else Detection.REPORTED


def detection_keys(
    faults: Sequence[tuple[str, float | None, float | None]],
    pct: Callable[[list[float], float], float | None],
) -> dict[str, Any]:
    """faults: (cause, seconds to cordon or None, seconds to serving or None) -> for each
    Detection, ``faults_<path>`` and the p95 seconds to cordon and to serving
    (``p95_<path>_fault_to_cordon_s``, ``p95_<path>_fault_to_serving_s``; None without one)."""
    out: dict[str, Any] = {}
    for path in Detection:
        mine = [f for f in faults if detection(f[0]) is path]
        cordon = [c for _, c, _ in mine if c is not None]
        serving = [s for _, _, s in mine if s is not None]
        out[f"faults_{path.value}"] = len(mine)
        out[f"p95_{path.value}_fault_to_cordon_s"] = pct(cordon, 0.95)
        out[f"p95_{path.value}_fault_to_serving_s"] = pct(serving, 0.95)
    return out
