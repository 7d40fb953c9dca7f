"""Acceptance: whether a launched or remedied node has passed its pool's acceptance suite. Pure.

The agent runs the suite once per boot (and again after a GPU reset) and puts the run in
every report of that boot (ReportSummary.acceptance); this module alone decides what the
run means for the node (navarch.report.acceptance says what each word is):

- the run has not finished, or a result is ``unknown``: ``running``; the node stays in
  ``acceptance`` (kept from the scheduler, counted against max, not serving) until the
  pool's acceptance ``deadline_s`` after the run started, then ``timed_out``: replaced, as
  a node silent past boot_timeout is (doubt holds a node, it never replaces it at once);
- a result failed its threshold on the node: ``failed``, replaced and counted dead on
  arrival, unless every failure is a finding about the image (a setting or version
  drift, navarch.report.acceptance.finding_of): ``held``, kept in acceptance, never replaced for it
  nor counted against its host, and named once for the pool (a ACCEPTANCE_HELD halt);
- every result passed: then the figures are judged against the pool's serving nodes
  (``judge_pool``): a bandwidth below ``min_fraction`` of their robust baseline fails
  (navarch.planner.acceptance_figures: at least 3 plausible figures, none above the GPU's
  published ceiling), unless new nodes keep failing the same baseline (then it is
  suspect and the node held); a version different from the baseline (declared, else the
  majority of the serving nodes) is drift, held when the pool's DriftPolicy is
  ``block``;
- a node whose run for its boot the planner accepted before (NodeMemory.accepted) is not
  judged again on that boot.

A node whose reports carry no run is held too (the gate fails closed: no run is no
pass): ``acceptance``, waiting for its agent's first run, until ``deadline_s`` after its
launch; then ``no_run``: still ``acceptance``, never replaced and never a strike against its
host, because an agent that reports no run (one without acceptance in its config, an
older bundle, a custom image) is a setting of the image, not broken hardware; the pool
gets a ``no_acceptance_run`` halt that is notified (navarch.planner.acceptance_stage). The
one exception is a node launched before its pool asked for acceptance
(PoolMemory.acceptance_since, ``launched_before_acceptance``): its agent was never given
a suite, and holding it would take a serving pool out of service the moment acceptance
is enabled.

Lemon hosts: every replacement this module causes carries ``ActionReason.ACCEPTANCE_FAILED``
(or ``ACCEPTANCE_TIMEOUT``) and the node's instance, so a host that fails acceptance twice can
be listed by whoever keeps the lemon host list (``ACCEPTANCE_LEMON_AFTER``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from navarch.fleet.durations import format_duration_s
from navarch.fleet.spec import FleetSpec, PoolSpec, Scheduler
from navarch.planner.acceptance_figures import (
    BASELINE_SUSPECT_AFTER,
    ceiling_gbps,
    robust_baseline,
)
from navarch.planner.model import (
    READY,
    Acceptance,
    Lifecycle,
    Memory,
    NodeMemory,
    NodeView,
    PoolMemory,
    ReportSummary,
)
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceRun,
    AcceptanceStatus,
    AcceptanceTest,
    DriftPolicy,
    Finding,
    finding_of,
)
from navarch.report.health import Remedy
from navarch.report.timefmt import parse_ts

__all__ = [
    "ACCEPTANCE_LEMON_AFTER",
    "RELATIVE_TESTS",
    "absolute_verdict",
    "acceptance_view",
    "choose_peer",
    "judge_acceptance_runs",
    "Peer",
    "PoolJudgement",
    "image_finding",
    "judge_pool",
    "launched_before_acceptance",
    "no_run_verdict",
    "unmatched_declared",
    "pairs_nodes",
    "peer_verdict",
    "return_verdict",
    "run_key",
    "with_peer_test",
]

#: Acceptance failures of one physical host after which it is a lemon host (never launched
#: on again): the issue's rule, "a host that fails twice".
ACCEPTANCE_LEMON_AFTER = 2

#: Tests whose figure is judged against the pool's median of serving nodes (min_fraction):
#: bandwidths, where a slow GPU or link shows as a node well below its neighbours.
RELATIVE_TESTS = frozenset(
    {AcceptanceTest.NCCL_ALL_REDUCE, AcceptanceTest.NVBANDWIDTH, AcceptanceTest.NCCL_MULTI_NODE}
)

#: A verdict: where the acceptance stands, and why in one line.
Verdict = tuple[Acceptance, str]


def run_key(run: AcceptanceRun) -> str:
    """The run's identity, "<boot_id>/<reset>", as NodeMemory.accepted keeps it."""
    return f"{run.boot_id}/{run.reset}"


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:g}"


def _result_line(r: AcceptanceResult) -> str:
    """One result in words: "nccl_all_reduce 120 GB/s (threshold 200 GB/s): why"."""
    unit = f" {r.unit}" if r.unit else ""
    figure = f" {_num(r.figure)}{unit}" if r.figure is not None else ""
    limit = f" (threshold {_num(r.threshold)}{unit})" if r.threshold is not None else ""
    why = f": {r.reason}" if r.reason else ""
    return f"{r.test}{figure}{limit}{why}"


def _elapsed_s(run: AcceptanceRun, s: ReportSummary, now: datetime) -> float:
    """Seconds since the run started, by the node's clock; a start time that does not
    parse counts from the report (the node's text is not trusted to be a time)."""
    try:
        started = parse_ts(run.started_at) or s.generated_at
    except ValueError:
        started = s.generated_at
    return max((now - started).total_seconds(), 0.0)


def _judge_run(
    policy: AcceptancePolicy, run: AcceptanceRun, s: ReportSummary, now: datetime
) -> Verdict:
    """A run of this boot on its own: failed, passed, or running (timed out past deadline)."""
    failed = [r for r in run.results if r.status is AcceptanceStatus.FAIL]
    hardware = [r for r in failed if finding_of(r) is Finding.HARDWARE]
    if hardware:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return Acceptance.FAILED, f"acceptance failed: {_result_line(hardware[0])}{more}"
    if failed:
        return Acceptance.HELD, "acceptance held: " + "; ".join(_result_line(r) for r in failed)
    if run.passed:
        return Acceptance.PASSED, f"acceptance passed ({len(run.results)} tests)"
    elapsed = _elapsed_s(run, s, now)
    unknown = [r for r in run.results if r.status is AcceptanceStatus.UNKNOWN]
    if run.finished_at is None:
        doing = f"acceptance running: {len(run.results)} tests done"
    elif unknown:
        doing = f"acceptance inconclusive: {_result_line(unknown[0])}"
    else:
        doing = "acceptance finished with no result"
    if elapsed > policy.deadline_s:
        return Acceptance.TIMED_OUT, (
            f"{doing}; not passed {format_duration_s(elapsed)} after it started "
            f"(acceptance deadline {format_duration_s(policy.deadline_s)})"
        )
    return Acceptance.RUNNING, f"{doing} ({format_duration_s(elapsed)} of deadline " + (
        f"{format_duration_s(policy.deadline_s)})"
    )


def launched_before_acceptance(since: datetime | None, launched_at: datetime) -> bool:
    """Whether a node was launched before its pool asked for acceptance: since is
    PoolMemory.acceptance_since (None: the pool has no acceptance, nothing to hold),
    launched_at the instance's launch (aware UTC). Such a node's agent was given no suite,
    so it is not held for a run."""
    return since is None or launched_at < since


def no_run_verdict(policy: AcceptancePolicy, node: str, waited_s: float) -> Verdict:
    """A node of an acceptance pool whose reports carry no run, waited_s seconds after the
    wait began (its launch, or its in-place remedy): ``running`` (held, waiting for the
    agent's first run) within policy.deadline_s, then ``no_run`` (held, never replaced:
    the agent config or image lacks acceptance, a setting of the image, not broken
    hardware; docs/design.md, Safety rules: no termination on missing data)."""
    deadline = format_duration_s(policy.deadline_s)
    if waited_s > policy.deadline_s:
        return Acceptance.NO_RUN, (
            f"no acceptance run from {node} by deadline ({deadline}): the agent config/image "
            "lacks acceptance; held out of service, not replaced"
        )
    return Acceptance.RUNNING, (
        f"acceptance waiting for the agent's first acceptance run ({format_duration_s(waited_s)} "
        f"of deadline {deadline})"
    )


def absolute_verdict(
    policy: AcceptancePolicy | None,
    s: ReportSummary,
    accepted: str,
    now: datetime,
    held_since: datetime | None = None,
    node: str = "",
) -> Verdict | None:
    """Where a serving-looking node's acceptance stands on its own, or None when it is not
    in acceptance.

    policy: the pool's (None: no acceptance); s: the node's newest accepted report; accepted:
    NodeMemory.accepted; now: aware UTC; held_since: when the node began to wait for a
    run (its launch), None when it is not held for one (launched_before_acceptance);
    node: its name, for the reason. None when there is no policy, the run is the one
    accepted before, or the report carries no run and held_since is None; no run
    otherwise is no_run_verdict's. A run of an earlier boot is ``running`` (the agent has
    not started this boot's yet). PASSED here still has to pass judge_pool.
    """
    run = s.acceptance
    if policy is None:
        return None
    if run is None:
        if held_since is None:
            return None
        return no_run_verdict(policy, node, max((now - held_since).total_seconds(), 0.0))
    if run.boot_id != s.boot_id:
        return Acceptance.RUNNING, "acceptance not started on this boot yet"
    if run_key(run) == accepted:
        return None
    return _judge_run(policy, run, s, now)


def return_verdict(
    policy: AcceptancePolicy | None,
    s: ReportSummary,
    rung: Remedy,
    rung_at: datetime | None,
    now: datetime,
    exempt: bool = False,
    node: str = "",
) -> Verdict | None:
    """Whether a node back from an in-place remedy (rung: reboot or reset_gpu, done at
    rung_at) has passed acceptance since; None when its pool has no acceptance policy, or
    its agent reports no run and it is exempt (launched_before_acceptance). A run counts
    when it is of the report's boot and, after a GPU reset (same boot), started after
    rung_at; otherwise it is ``running``. No run from a node that is not exempt is
    no_run_verdict's, counted from rung_at (node: its name, for the reason)."""
    run = s.acceptance
    if policy is None:
        return None
    if run is None:
        if exempt:
            return None
        waited_s = 0.0 if rung_at is None else max((now - rung_at).total_seconds(), 0.0)
        return no_run_verdict(policy, node, waited_s)
    if run.boot_id != s.boot_id:
        return Acceptance.RUNNING, f"acceptance not started since the {rung.value}"
    if rung is Remedy.RESET_GPU and rung_at is not None:
        try:
            started = parse_ts(run.started_at)
        except ValueError:
            started = None
        if started is None or started < rung_at:
            return Acceptance.RUNNING, f"acceptance not started since the {rung.value}"
    return _judge_run(policy, run, s, now)


def _figures(run: AcceptanceRun | None) -> dict[str, float]:
    """A run's passed figures of the relative tests, by test."""
    if run is None:
        return {}
    return {
        r.test: r.figure
        for r in run.results
        if r.test in RELATIVE_TESTS and r.figure is not None and r.status is AcceptanceStatus.PASS
    }


def _versions(run: AcceptanceRun | None) -> dict[str, str]:
    """A run's versions by component (the ``versions`` result's detail)."""
    if run is None:
        return {}
    for r in run.results:
        if r.test == AcceptanceTest.VERSIONS:
            return dict(r.detail)
    return {}


def _baseline(
    policy: AcceptancePolicy, peers: Sequence[AcceptanceRun | None]
) -> dict[str, tuple[str, str]]:
    """component -> (version, where it comes from): the pool's declared versions, else the
    strict majority of the serving nodes that report the component."""
    out = {k: (v, "declared") for k, v in policy.versions.items()}
    seen: dict[str, Counter[str]] = {}
    for run in peers:
        for k, v in _versions(run).items():
            seen.setdefault(k, Counter())[v] += 1
    for k, counts in seen.items():
        if k in out:
            continue
        (top, n), total = counts.most_common(1)[0], sum(counts.values())
        if 2 * n > total:
            out[k] = (top, f"majority of {total} serving nodes")
    return out


@dataclass(frozen=True)
class Peer:
    """A serving node's run as judge_pool reads it: its name, its instance type as the
    cloud lists it (never as the node says), and its run with any pair test (or None)."""

    node: str
    instance_type: str
    run: AcceptanceRun | None


@dataclass(frozen=True)
class PoolJudgement:
    """What judge_pool decided for one pool.

    verdicts: candidate -> (PASSED, FAILED, HELD or RUNNING, why); findings: candidate
    held -> the pool-wide finding that holds it, and serving node -> the flag on a figure
    of its own refused as implausible; misses: PoolMemory.baseline_misses after this run."""

    verdicts: Mapping[str, Verdict]
    findings: Mapping[str, str]
    misses: tuple[tuple[str, str], ...]


def _implausible(instance_type: str, run: AcceptanceRun | None) -> list[str]:
    """The run's relative figures above the published ceiling of its instance type, in
    words ("nccl_all_reduce 100000 GB/s above the published ceiling 900 GB/s (...)")."""
    out = []
    for test, fig in sorted(_figures(run).items()):
        ceiling = ceiling_gbps(instance_type, test)
        if ceiling is not None and fig > ceiling[0]:
            out.append(
                f"{test} {_num(fig)} GB/s above the published ceiling {_num(ceiling[0])} GB/s"
                f" ({ceiling[1]})"
            )
    return out


def _pool_baselines(peers: Sequence[Peer]) -> tuple[dict[str, float], dict[str, str]]:
    """(test -> robust_baseline of the serving nodes' plausible figures, serving node ->
    its flag) for the relative tests; a test with fewer than MIN_PEERS plausible figures
    has no baseline."""
    figures: dict[str, list[float]] = {}
    flags: dict[str, str] = {}
    for p in peers:
        refused = _implausible(p.instance_type, p.run)
        if refused:
            flags[p.node] = (
                "flagged: " + "; ".join(refused) + ": not counted in the pool's acceptance baseline"
            )
            continue
        for test, figure in _figures(p.run).items():
            figures.setdefault(test, []).append(figure)
    baselines = {}
    for test, figs in figures.items():
        b = robust_baseline(figs)
        if b is not None:
            baselines[test] = b
    return baselines, flags


def unmatched_declared(policy: AcceptancePolicy, peers: Sequence[Peer]) -> dict[str, str]:
    """The declared versions (policy.versions) that no serving node reports, by component:
    with none matching, the declaration is the likelier mistake than every node."""
    return {
        k: v
        for k, v in policy.versions.items()
        if not any(_versions(p.run).get(k) == v for p in peers)
    }


def image_finding(run: AcceptanceRun, unmatched: Mapping[str, str]) -> str:
    """The pool-wide words for a run held by a finding about the image: the failed tests
    that are settings or drift, and a declared version no serving node has (unmatched:
    unmatched_declared). The same words for every node it holds: one finding per pool."""
    tests = sorted({r.test for r in run.results if r.status is AcceptanceStatus.FAIL})
    if AcceptanceTest.VERSIONS.value in tests and unmatched:
        declared = ", ".join(f"{k} {v}" for k, v in sorted(unmatched.items()))
        return (
            f"the declared acceptance versions ({declared}) match no serving node: the "
            "declaration, not the nodes, is suspect; acceptance replacements held until it or "
            "the image is fixed"
        )
    return (
        f"a finding about the image, not the hardware: {', '.join(tests)} failed (a setting "
        "or version drift every node of the image shares); acceptance replacements held until "
        "the image is fixed"
    )


def _slow(
    policy: AcceptancePolicy, run: AcceptanceRun, baselines: Mapping[str, float]
) -> tuple[list[str], list[str], bool]:
    """(lines of the run's relative figures below min_fraction of the baseline, the
    baselines they failed as words, whether any figure was judged at all)."""
    own = _figures(run)
    judged = any(test in baselines for test in own)
    lines, against = [], []
    for test, fig in sorted(own.items()):
        if test not in baselines or fig >= policy.min_fraction * baselines[test]:
            continue
        b = baselines[test]
        lines.append(
            f"{test} {_num(fig)} GB/s below {_num(policy.min_fraction)} of the pool's "
            f"baseline {_num(b)} GB/s (threshold {_num(policy.min_fraction * b)} GB/s)"
        )
        against.append(f"{test} {_num(b)} GB/s")
    return lines, against, judged


def judge_pool(
    policy: AcceptancePolicy,
    candidates: Mapping[str, tuple[str, AcceptanceRun]],
    peers: Sequence[Peer],
    misses: tuple[tuple[str, str], ...] = (),
) -> PoolJudgement:
    """Judge each candidate's passed run against the pool's serving nodes.

    candidates: node -> (its instance type as the cloud lists it, its run that passed on
    its own); peers: the pool's serving (READY) nodes past acceptance; misses:
    PoolMemory.baseline_misses. A relative figure above the published ceiling of the
    node's type (acceptance_figures.ceiling_gbps) is implausible: a candidate's test reads
    unknown (RUNNING, the acceptance deadline then ends it), a peer's figure is left out
    and the peer flagged. A figure below policy.min_fraction of the pool's robust baseline
    (at least MIN_PEERS plausible figures, acceptance_figures.robust_baseline) fails, unless
    it is the BASELINE_SUSPECT_AFTER-th new node in a row to fail the same baseline: then
    it is HELD, the baseline suspect. Version drift from _baseline is HELD (a finding
    about the image) under DriftPolicy.BLOCK and named under WARN. Never raises.
    """
    baselines, findings = _pool_baselines(peers)
    version_base = _baseline(policy, [p.run for p in peers])
    unmatched = unmatched_declared(policy, peers)
    out: dict[str, Verdict] = {}
    for node, (itype, run) in sorted(candidates.items()):
        refused = _implausible(itype, run)
        if refused:
            out[node] = (
                Acceptance.RUNNING,
                ("acceptance inconclusive: " + "; ".join(refused) + " is implausible (unknown)"),
            )
            continue
        slow, against, judged = _slow(policy, run, baselines)
        drift = [
            f"drift: {k} {v} (pool {version_base[k][0]}, {version_base[k][1]})"
            for k, v in sorted(_versions(run).items())
            if k in version_base and v != version_base[k][0]
        ]
        if slow:
            key = "; ".join(against)
            misses = tuple(m for m in misses if m[1] == key and m[0] != node) + ((node, key),)
            if len(misses) >= BASELINE_SUSPECT_AFTER:
                findings[node] = (
                    f"{len(misses)} new nodes in a row below the pool's baseline ({key}): "
                    "the baseline is suspect, not the nodes; acceptance replacements held until "
                    "a person checks the serving nodes' figures"
                )
                out[node] = Acceptance.HELD, "acceptance held: " + "; ".join(slow + drift)
            else:
                out[node] = Acceptance.FAILED, "acceptance failed: " + "; ".join(slow + drift)
            continue
        if judged:
            misses = ()  # a node passed against the baseline: the row is broken
        if drift and policy.drift is DriftPolicy.BLOCK:
            findings[node] = image_finding(_drift_run(run), unmatched)
            out[node] = Acceptance.HELD, "acceptance held: " + "; ".join(drift)
        elif drift:
            out[node] = Acceptance.PASSED, "acceptance passed; " + "; ".join(drift)
        else:
            out[node] = Acceptance.PASSED, f"acceptance passed ({len(run.results)} tests)"
    return PoolJudgement(out, findings, misses)


def _drift_run(run: AcceptanceRun) -> AcceptanceRun:
    """run with its versions result read as failed (drift from the pool's baseline), so
    image_finding names it as the agent's own failure would be named."""
    return replace(
        run,
        results=tuple(
            replace(r, status=AcceptanceStatus.FAIL)
            if r.test == AcceptanceTest.VERSIONS.value
            else r
            for r in run.results
        ),
    )


def acceptance_view(
    gate: Verdict, lc: Lifecycle, reason: str, extra: dict[str, Any]
) -> tuple[Acceptance, Lifecycle, str, dict[str, Any]]:
    """A serving-looking node's view under its acceptance verdict: running, no run or held
    (a finding about the image, not the node) -> acceptance (held, never replaced for it);
    failed or timed out -> unhealthy at once (replaced); passed -> as it was, the reason
    saying so (judge_acceptance_runs still judges it against its pool and names a pool-wide
    finding)."""
    standing, why = gate
    if standing in (Acceptance.RUNNING, Acceptance.NO_RUN, Acceptance.HELD):
        return standing, Lifecycle.ACCEPTANCE, why, {}
    if standing in (Acceptance.FAILED, Acceptance.TIMED_OUT):
        return standing, Lifecycle.UNHEALTHY, why, {"immediate": True}
    return standing, lc, f"{why}; {reason}", extra


def _itype(v: NodeView) -> str:
    """The node's instance type as the cloud lists it ("" unknown)."""
    return v.instance.instance_type if v.instance is not None else ""


def _apply(
    policy: AcceptancePolicy,
    v: NodeView,
    verdict: Verdict,
    finding: str,
    run: AcceptanceRun,
    now: datetime | None,
) -> NodeView:
    """v under its pool verdict: failed -> unhealthy at once (replaced); held -> acceptance
    with the pool-wide finding; running (an implausible figure) -> acceptance until the
    acceptance deadline after the run started, then timed out; passed -> the reason."""
    standing, why = verdict
    if standing is Acceptance.FAILED:
        return replace(
            v, lifecycle=Lifecycle.UNHEALTHY, reason=why, acceptance=standing, immediate=True
        )
    if standing is Acceptance.HELD:
        return replace(
            v,
            lifecycle=Lifecycle.ACCEPTANCE,
            reason=f"{why}; {finding}",
            acceptance=standing,
            finding=finding,
        )
    if standing is Acceptance.RUNNING:
        s = v.summary
        if now is not None and s is not None and _elapsed_s(run, s, now) > policy.deadline_s:
            why = f"{why}; not passed within the acceptance deadline"
            return replace(
                v,
                lifecycle=Lifecycle.UNHEALTHY,
                reason=why,
                acceptance=Acceptance.TIMED_OUT,
                immediate=True,
            )
        return replace(v, lifecycle=Lifecycle.ACCEPTANCE, reason=why, acceptance=standing)
    return replace(v, reason=why)


def _peers(
    out: Sequence[NodeView], idx: Sequence[int], folded: Mapping[str, NodeMemory], memory: Memory
) -> list[Peer]:
    """The pool's serving nodes past acceptance, with their pair test joined to their run."""
    return [
        Peer(
            out[i].node,
            _itype(out[i]),
            with_peer_test(summary.acceptance, folded.get(out[i].node) or memory.node(out[i].node)),
        )
        for i in idx
        if out[i].lifecycle in READY
        and out[i].acceptance is None
        and (summary := out[i].summary) is not None
    ]


def _candidates(
    pool: PoolSpec,
    out: list[NodeView],
    idx: Sequence[int],
    folded: Mapping[str, NodeMemory],
    memory: Memory,
    now: datetime | None,
) -> dict[str, tuple[str, AcceptanceRun]]:
    """The pool's nodes whose run passed on its own, by name -> (instance type, run with
    the pair test where the pool pairs nodes; out[i] updated when it waits on one)."""
    candidates: dict[str, tuple[str, AcceptanceRun]] = {}
    for i in idx:
        s = out[i].summary
        if out[i].acceptance is Acceptance.PASSED and s is not None and s.acceptance is not None:
            candidates[out[i].node] = _itype(out[i]), s.acceptance
    if pairs_nodes(pool) and now is not None:
        for i in idx:
            if out[i].node not in candidates:
                continue
            itype, run = candidates[out[i].node]
            nm = folded.get(out[i].node) or memory.node(out[i].node)
            out[i], merged = peer_verdict(pool, out, out[i], run, nm, now)
            if merged is None:
                del candidates[out[i].node]
            else:
                candidates[out[i].node] = itype, merged
    return candidates


def _judge_one_pool(
    pool: PoolSpec,
    out: list[NodeView],
    idx: Sequence[int],
    folded: Mapping[str, NodeMemory],
    memory: Memory,
    now: datetime | None,
) -> tuple[dict[str, NodeMemory], PoolMemory | None]:
    """judge_acceptance_runs for one pool with an acceptance policy; out is updated in place.
    Returns (the NodeMemory of each node that passed, the pool's memory when its
    baseline_misses changed)."""
    policy = pool.acceptance or AcceptancePolicy()
    accepted: dict[str, NodeMemory] = {}
    peers = _peers(out, idx, folded, memory)
    unmatched = unmatched_declared(policy, peers)
    for i in idx:
        s = out[i].summary
        if out[i].acceptance is Acceptance.HELD and s is not None and s.acceptance is not None:
            finding = image_finding(s.acceptance, unmatched)
            out[i] = replace(out[i], reason=f"{out[i].reason}; {finding}", finding=finding)
    candidates = _candidates(pool, out, idx, folded, memory, now)
    if not candidates and not peers:
        return accepted, None
    pm = memory.pool(pool.name)
    judged = judge_pool(policy, candidates, peers, pm.baseline_misses)
    for i in idx:
        v = out[i]
        flag = judged.findings.get(v.node, "")
        if v.node not in judged.verdicts:
            if flag:  # a serving node whose own figure was refused
                out[i] = replace(v, reason=f"{v.reason}; {flag}", finding=flag)
            continue
        run = candidates[v.node][1]
        out[i] = _apply(policy, v, judged.verdicts[v.node], flag, run, now)
        nm = folded.get(v.node) or memory.node(v.node)
        if judged.verdicts[v.node][0] is Acceptance.PASSED and nm is not None:
            accepted[v.node] = replace(nm, accepted=run_key(run))
    changed = replace(pm, baseline_misses=judged.misses)
    return accepted, (changed if changed != pm else None)


def judge_acceptance_runs(
    spec: FleetSpec,
    views: Sequence[NodeView],
    changed: Sequence[NodeMemory],
    memory: Memory,
    now: datetime | None = None,
) -> tuple[list[NodeView], dict[str, NodeMemory], dict[str, PoolMemory]]:
    """Judge every node whose acceptance passed on its own against its pool (judge_pool).

    views: observe's views; changed: the NodeMemory observe folded this run (newer than
    memory's); now: aware UTC, for the multi-node test's and an implausible figure's
    deadline (None: not waited on). In a pool that pairs nodes (``pairs_nodes``) the
    node's multi-node NCCL result joins its run first (``peer_verdict``). Returns the
    views (a failed node now unhealthy with its reason and Acceptance.FAILED; a held one
    acceptance with Acceptance.HELD and the pool-wide ``finding``; a serving node whose figure
    was refused as implausible flagged in its reason and ``finding``; one waiting on its
    pair test acceptance with the peer), for each node that passed its NodeMemory with
    ``accepted`` set to the run's key (so it is not judged again on that boot), and the
    PoolMemory of each pool whose ``baseline_misses`` changed. Never raises.
    """
    out = list(views)
    accepted: dict[str, NodeMemory] = {}
    pools: dict[str, PoolMemory] = {}
    if all(p.acceptance is None for p in spec.pools):
        return out, accepted, pools  # most fleets: no pass over the nodes at all
    folded = {nm.node: nm for nm in changed}
    by_pool: dict[str, list[int]] = {}
    for i, v in enumerate(out):
        if v.acceptance in (Acceptance.PASSED, Acceptance.HELD) or v.lifecycle in READY:
            by_pool.setdefault(v.pool, []).append(i)
    for pool in spec.pools:
        if pool.acceptance is None or pool.name not in by_pool:
            continue
        passed, pm = _judge_one_pool(pool, out, by_pool[pool.name], folded, memory, now)
        accepted.update(passed)
        if pm is not None:
            pools[pool.name] = pm
    return out, accepted, pools


def choose_peer(pool: PoolSpec, views: Sequence[NodeView], node: str) -> str | None:
    """The known-good peer for `node`'s multi-node NCCL test, or None.

    pool: the node's pool (None unless its acceptance asks for multi_node and its
    scheduler can launch the two-node job: Slurm); views: observe's views. Known-good: a
    HEALTHY node of the pool, past acceptance (no verdict this run), other than `node`, whose
    report carries a run that passed, with no figure above its type's published ceiling
    (a flagged node never is). Of those, the first by name: a peer's own figures never
    choose it, so no node can make itself every new node's pair by what it reports. Pure:
    the executor runs the test (navarch.remote.nccl_peer.run_peer_test). Source: the
    issue's rule, a known-good peer of the same pool, as HyperPod's and CoreWeave's
    multi-node checks pair a new node.
    """
    policy = pool.acceptance
    if policy is None or not policy.multi_node or pool.scheduler is not Scheduler.SLURM:
        return None
    for v in sorted(views, key=lambda v: v.node):
        s = v.summary
        if (
            v.pool != pool.name
            or v.node == node
            or v.lifecycle is not Lifecycle.HEALTHY
            or v.acceptance is not None
            or v.finding
            or s is None
            or s.acceptance is None
            or not s.acceptance.passed
            or _implausible(_itype(v), s.acceptance)
        ):
            continue
        return v.node
    return None


def pairs_nodes(pool: PoolSpec) -> bool:
    """Whether the pool's acceptance includes the multi-node NCCL test: acceptance
    multi_node on a Slurm pool (the scheduler navarch launches the pair through)."""
    policy = pool.acceptance
    return policy is not None and policy.multi_node and pool.scheduler is Scheduler.SLURM


def with_peer_test(run: AcceptanceRun | None, nm: NodeMemory | None) -> AcceptanceRun | None:
    """run with the node's multi-node NCCL result (NodeMemory.peer_test) appended when that
    result is for this run (peer_run == run_key(run)); run itself otherwise."""
    if run is None or nm is None or nm.peer_test is None or nm.peer_run != run_key(run):
        return run
    return replace(run, results=run.results + (nm.peer_test,))


def peer_verdict(
    pool: PoolSpec,
    views: Sequence[NodeView],
    v: NodeView,
    run: AcceptanceRun,
    nm: NodeMemory | None,
    now: datetime,
) -> tuple[NodeView, AcceptanceRun | None]:
    """Node v's acceptance in a pool that pairs nodes, once its single-node run passed:
    (its view, its run with the pair result to judge against the pool, or None when it is
    not a candidate this run).

    No result for this run: acceptance, waiting on the peer choose_peer names (NodeView.peer:
    the plan starts the test); with no known-good peer in the pool (its first nodes) the
    run is judged without the test, and the reason says so. A result: judged with the run
    (_judge_run): a fail fails the acceptance (dead on arrival); unknown holds it in acceptance,
    the test planned again, until the acceptance deadline, then timed out; a pass leaves
    it a candidate for judge_pool. Source: the issue's rule, a pair test with a known-good
    peer of the same pool, judged like the other tests.
    """
    policy = pool.acceptance or AcceptancePolicy()
    merged, s = with_peer_test(run, nm), v.summary
    if merged is None or s is None:
        return v, run
    if merged is run:
        peer = choose_peer(pool, views, v.node)
        if peer is None:
            why = "multi-node NCCL not run: no known-good peer in the pool yet"
            return replace(v, reason=f"{v.reason}; {why}"), run
        why = f"acceptance waiting for the multi-node NCCL test with {peer}"
        if _elapsed_s(run, s, now) > policy.deadline_s:
            # Never run (its action failing every run) is no pass: the deadline holds.
            why = f"{why}; not run within the acceptance deadline"
            return replace(
                v,
                lifecycle=Lifecycle.UNHEALTHY,
                acceptance=Acceptance.TIMED_OUT,
                reason=why,
                immediate=True,
            ), None
        waiting = replace(
            v, lifecycle=Lifecycle.ACCEPTANCE, acceptance=Acceptance.RUNNING, reason=why, peer=peer
        )
        return waiting, None
    standing, why = _judge_run(policy, merged, s, now)
    if standing is Acceptance.PASSED:
        return v, merged
    if standing is Acceptance.RUNNING:
        peer = choose_peer(pool, views, v.node) or ""
        return replace(
            v, lifecycle=Lifecycle.ACCEPTANCE, acceptance=standing, reason=why, peer=peer
        ), None
    return replace(
        v, lifecycle=Lifecycle.UNHEALTHY, acceptance=standing, reason=why, immediate=True
    ), None
