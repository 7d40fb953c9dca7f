"""A node's acceptance run made safe to keep: every string plain, one line and capped.

The run comes from a node's report, so its text is hostile (navarch.textsafe): this is
the one place the reconciler makes it plain, when it summarises a report and when it
reads Memory back, so the planner, the audit log and every renderer hold only visible
one-line text.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.report.acceptance import AcceptanceResult, AcceptanceRun
from navarch.textsafe import node_text

__all__ = ["MAX_RESULTS", "plain_result", "plain_run"]

#: Results kept per run: the schema's maxItems.
MAX_RESULTS = 64
#: Entries of a result's detail kept (the schema's maxProperties) and their length.
_MAX_DETAIL = 32
_DETAIL_CHARS = 80


def plain_result(r: AcceptanceResult) -> AcceptanceResult:
    """r with every string node_text (capped as plain_run caps a run's). Never raises."""
    detail = {
        node_text(k, _DETAIL_CHARS): node_text(v, _DETAIL_CHARS)
        for k, v in list(r.detail.items())[:_MAX_DETAIL]
    }
    return replace(
        r,
        test=node_text(r.test, 64),
        unit=node_text(r.unit, 32),
        tool_version=node_text(r.tool_version, 80),
        reason=node_text(r.reason),
        detail=detail,
    )


def plain_run(run: AcceptanceRun) -> AcceptanceRun:
    """run with every string node_text (capped: test 64, unit 32, tool version and
    detail 80, reason NODE_TEXT_MAX_CHARS characters) and at most MAX_RESULTS results.
    Never raises."""
    return replace(
        run,
        boot_id=node_text(run.boot_id),
        started_at=node_text(run.started_at, 40),
        finished_at=None if run.finished_at is None else node_text(run.finished_at, 40),
        results=tuple(plain_result(r) for r in run.results[:MAX_RESULTS]),
    )
