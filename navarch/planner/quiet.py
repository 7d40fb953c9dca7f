"""Quiet reports: the event-started run that has nothing to decide.

The store announces every report written, heartbeats included, so most runs the events
start are for reports that say again what the last one said: a node in service, healthy,
on the same boot. Nothing in such a report can make a cordon, a drain or a launch due, so
the run folds the reports into Memory (the fold observe() gives them: fold_report) and
plans nothing, without listing the clouds or observing the other nodes. Any other report
(a fault, a notice, a new boot, a first report, a node out of service or awaiting
acceptance, a rejected object) takes the full run, which lists and plans as every run does.

What such a run leaves to the periodic run (events make a run sooner, never replace the
schedule): every decision that does not come from a report's health: deadlines passing,
drift, spares and scale-down choices that prefer idle nodes, capacity. Its Plan says it is
partial (Plan.partial), never "No changes".

Pure: no I/O, no clock reads, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping

from navarch.fleet.spec import FleetSpec
from navarch.planner.model import Memory, NodeMemory, Phase, ReportObservation, ReportSummary
from navarch.planner.observe import fold_report
from navarch.report.health import Status

__all__ = ["quiet_fold"]


def quiet_fold(
    spec: FleetSpec, memory: Memory, reports: Mapping[str, ReportObservation]
) -> tuple[NodeMemory, ...] | None:
    """The named nodes' Memory with their reports folded, when every report is quiet ->
    the NodeMemory that changed (empty: every report was folded already, a duplicate
    event), or None when any report needs the full run.

    reports: node name -> this run's observation of the report its event named. A node
    Memory does not know, of a pool fleet.yaml no longer declares, or whose report moved
    pools is never quiet.
    """
    pools = {p.name: p for p in spec.pools}
    changed: list[NodeMemory] = []
    for name, obs in sorted(reports.items()):
        nm = memory.node(name)
        pool = pools.get(obs.pool)
        if nm is None or pool is None or nm.pool != obs.pool:
            return None
        if pool.acceptance is not None and not nm.accepted:
            return None  # awaiting acceptance: a report may carry its verdict
        if not _quiet(nm, obs):
            return None
        folded = fold_report(nm, obs)
        if folded is not nm:
            changed.append(folded)
    return tuple(changed)


def _quiet(nm: NodeMemory, obs: ReportObservation) -> bool:
    """The node is in service with nothing under way, its last report healthy, and this
    one accepted, healthy and from the same boot, with nothing the last one lacked."""
    last, s = nm.report, obs.summary
    if obs.rejected or s is None or last is None or nm.report_rejected is not None:
        return False
    in_service = (
        nm.phase is Phase.NONE
        # An acceptance cordon has no phase and changes nothing a quiet report could.
        and (nm.cordon is None or nm.cordon.acceptance)
        and not (nm.fault or nm.rung or nm.diag or nm.impaired_since)
        and not (nm.streak or nm.return_streak)
    )
    return (
        in_service
        and _healthy(last)
        and _healthy(s)
        and s.boot_id == last.boot_id
        and s.acceptance == last.acceptance
    )


def _healthy(s: ReportSummary) -> bool:
    """Healthy with nothing to say: no fatal XID, notice, fault or finding."""
    return (
        s.status is Status.HEALTHY
        and not s.fatal
        and s.notice_kind is None
        and s.fault_key is None
        and not s.findings
    )
