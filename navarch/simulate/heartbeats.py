"""Heartbeats that change nothing, accounted instead of built, signed and verified.

A quiescent node's heartbeat (navarch.simulate.world: the agent would read what its last
check read and write the same report again, later) carries nothing new but its time and
sequence. Building, signing and verifying it report by report was most of a large
fleet's simulation (bench/simulate_cost.py). The ledger accounts it instead: the agent's
state records the write (SimAgent.account_heartbeat), the store gives the object a new
version and modification time (MemoryStore.touch), and the summary a run would verify
from those bytes (the last accepted summary with the new sequence, generated_at and
stored_at) is put in the verified-report cache the run reads (navarch.reconcile.report_cache,
through the fleet's CacheMemo). The run then reads it as it reads any report whose
version the cache holds: same listing, same replay rule, same ages. Anything else (the
node's first report of a boot, a changed input, acceptance tools on the machine, a store
that cannot be written, no cache document yet) runs the shipped agent as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson

from navarch.agent.runner import STREAK_WRITE_CAP
from navarch.errors import ReportRejected
from navarch.fleet.spec import FleetSpec
from navarch.planner.model import Memory, ReportSummary
from navarch.reconcile.codec import summary_to_json
from navarch.reconcile.report_cache import CacheMemo, report_cache_key, rules_digest
from navarch.reconcile.reports import verify_report
from navarch.report.timefmt import parse_ts
from navarch.simulate.world import SimNode, World

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class HeartbeatLedger:
    """The heartbeats one simulation accounted, and what a run will read of each.

    known: report key -> (store version, the summary of the object at that version): what
    the last run accepted (after_run) or this ledger derived since (account). pending: the
    derived ones, kept in the cache memo until a run took them into Memory.
    """

    world: World
    spec: FleetSpec
    memo: CacheMemo
    secret: bytes
    accounted: int = 0
    known: dict[str, tuple[str, ReportSummary]] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    _digests: dict[str, str] = field(default_factory=dict)
    _rules: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The rules and their digest the reader uses per pool (navarch.reconcile.reports).
        self._rules = {p.name: p.health.rule_sets() for p in self.spec.pools}
        self._digests = {name: rules_digest(rules) for name, rules in self._rules.items()}

    def account(self, n: SimNode) -> bool:
        """The world's heartbeat hook: account n's heartbeat now, when it repeats the last
        report a run read (or this ledger derived) -> True; False: run the real agent."""
        w = self.world
        agent = n.agent
        key = agent.config.report_key
        entry = self.known.get(key)
        state = agent.host.state
        if (
            not w.lazy
            or entry is None
            or state is None
            or not self._cache_in_step()
            or entry[0] != w.store.version(key)
            or entry[1].boot_id != agent.config.boot_id
            or not agent.reads_as_last_run()
            or not _at_rest(agent.last_report, state.streaks)
            or w.writes_fail()
            or w.cut_off(n)
            or w._in_window(w.scenario.zone_outages, n.instance.zone)
        ):
            return False
        sequence = agent.account_heartbeat(w.now)
        info = w.store.touch(key)
        summary = replace(
            entry[1],
            sequence=sequence,
            generated_at=w.now,
            stored_at=parse_ts(info.modified_at),
        )
        self._derived(key, info.version, n.pool, summary)
        n.last_write_s = w.t
        self.accounted += 1
        return True

    def news(self, n: SimNode) -> bool:
        """The world's hook for a report active node n just wrote: whether a run would read
        anything new in it. Verified here as the run's reader verifies it (the same bytes,
        listing time and rules); a summary equal to the one the run holds but for its
        sequence and times (a verdict's run of checks counted up, which no summary carries)
        is not news, and goes to the cache memo so the run does not verify it again."""
        agent = n.agent
        key = agent.config.report_key
        entry = self.known.get(key)
        info = self.world.store.stat(key)
        if entry is None or info is None or not agent.tools_settled():
            return True
        try:
            summary = verify_report(
                self.world.store.get(key).data,
                fleet=self.spec.name,
                pool=n.pool,
                node=n.node,
                fleet_secret=self.secret,
                last_sequence=entry[1].sequence,
                now=self.world.now,
                stored_at=parse_ts(info.modified_at),
                rule_sets=self._rules[n.pool],
            )
        except ReportRejected:
            return True
        if _timeless(summary) != _timeless(entry[1]):
            return True
        self._derived(key, info.version, n.pool, summary)
        return False

    def _derived(self, key: str, version: str, pool: str, summary: ReportSummary) -> None:
        """Record the summary of the object at key's version, for the next run's reader."""
        doc = orjson.loads(orjson.dumps(summary_to_json(summary)))
        cached = {"version": version, "rules": self._digests[pool], "summary": doc}
        self.known[key] = (version, summary)
        self.pending[key] = cached
        if self._cache_in_step():
            self.memo.entries[key] = cached

    def before_run(self) -> None:
        """Put every derived summary a run has not taken yet back in the cache memo (a run
        that did not list a report saves the cache without it)."""
        if self._cache_in_step():
            self.memo.entries.update(self.pending)

    def after_run(self, memory: Memory) -> None:
        """What the run accepted: each node's summary at its store version."""
        prefix = f"health/{self.spec.name}/"
        for nm in memory.nodes:
            if nm.report is None or nm.report_rejected is not None or nm.report_version is None:
                continue
            key = f"{prefix}{nm.pool}/{nm.node}.json"
            self.known[key] = (nm.report_version, nm.report)
            taken = self.pending.get(key)
            if taken is not None and taken["version"] == nm.report_version:
                del self.pending[key]

    def _cache_in_step(self) -> bool:
        """Whether the next run loads the cache from this memo (its document is the one
        the memo holds); before the first run wrote one, nothing is accounted."""
        version = self.world.store.version(report_cache_key(self.spec.name))
        return bool(self.memo.version) and version == self.memo.version


def _at_rest(report: dict[str, Any] | None, streaks: Any) -> bool:
    """Whether the last report is one a repeat of changes nothing: no check with a fault,
    and its verdict's run of checks at the cap (World._quiescent's rule)."""
    if report is None or any(c.get("fault_key") for c in report["checks"]):
        return False
    return int(streaks.get(f"verdict|{report['status']}", 0)) >= STREAK_WRITE_CAP


def _timeless(s: ReportSummary) -> ReportSummary:
    """The summary without what every new report changes: sequence and times."""
    return replace(s, sequence=0, generated_at=_EPOCH, stored_at=None)
