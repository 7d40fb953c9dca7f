"""The verified-report cache: summaries of reports already checked, by store version.

A run lists health/<fleet>/ (one LIST page per 1,000 keys carries each object's version:
S3 ETag, GCS generation, the file store's mtime and inode) and fetches and verifies only
the reports whose version it has no verified summary for. Summaries come from Memory (the
version the last apply folded in) and, for every other version verified before, from this
cache. It holds only those (Memory's own are not copied into it, so after an apply it is
small), kept beside the state as ``state/<fleet>.reports-cache.json``: a header line,
then the entries document whose exact bytes the header's MAC signs::

    {"format": 2, "mac": "<hex HMAC-SHA256 of the bytes after this line>"}
    {"health/<fleet>/<pool>/<node>.json":
        {"version": "<store version>", "rules": "<rules digest>", "summary": {...}}}

Correctness never depends on it. An entry is used only for the exact store version it was
verified at (a store version names one content of an object, as the state's compare-and-
swap relies on) and with the same health policy rules (``rules_digest``); the whole
document is used only when its MAC, made with a key derived from the fleet secret
(``cache_key``), matches: a tampered document, or one made under another secret, is
ignored whole and every report is fetched and verified again. One MAC for the document
rather than one per entry keeps a 100,000-node run from hashing 100,000 entries twice. The
replay rule still applies to a cached summary (its sequence must be above the last one
accepted for the node). A lost, corrupt or unreadable cache only costs the time of
verifying every report once.

The document is written only when its entries changed, by plan and apply alike (the only
object a plan writes); a failed write is logged and changes nothing else.
Benchmark: ``bench/scale.py`` (``incremental_vs_floor_10k``, ``incremental_vs_floor_100k``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from navarch.errors import NotFound
from navarch.fleet.policy import Rule
from navarch.planner.model import ReportSummary
from navarch.reconcile.codec import summary_from_json, summary_to_json
from navarch.stores.base import ObjectStore

__all__ = ["ReportCache", "cache_key", "rules_digest", "report_cache_key", "CACHE_FORMAT"]

log = logging.getLogger(__name__)

CACHE_FORMAT = 2


def report_cache_key(fleet: str) -> str:
    """Object key of the fleet's verified-report cache, beside its state."""
    return f"state/{fleet}.reports-cache.json"


def cache_key(fleet_secret: bytes, fleet: str) -> bytes:
    """The cache's HMAC key: HMAC-SHA256(fleet secret, "navarch-reports-cache/v1|<fleet>").

    Derived like the node keys (navarch.report.signing), so no node key can make an entry and a
    changed secret invalidates every entry."""
    return hmac.new(
        fleet_secret, f"navarch-reports-cache/v1|{fleet}".encode(), hashlib.sha256
    ).digest()


def rules_digest(rule_sets: Sequence[Sequence[Rule]] | None) -> str:
    """A short digest of a pool's health policy rules (name, condition, status, action):
    a summary made under other rules is not reused."""
    if rule_sets is None:
        return "agent"
    doc = [
        [[r.name, r.when, r.status.value, r.action.value if r.action else None] for r in rules]
        for rules in rule_sets
    ]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


@dataclass
class CacheMemo:
    """The cache document this process last wrote or read: its store version and entries.

    A store's version names one content of an object (as StateCache relies on), so a load
    that finds the version this process wrote or verified reuses the entries instead of
    checking the MAC and parsing them again. Useful to a process that runs many
    reconciles (navarch simulate); one `navarch apply` reads the cache once.
    """

    version: str = ""
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ReportCache:
    """The cache of one run: the entries loaded, and those this run verified or reused.

    entries: object key -> the stored entry (JSON form, see the module docstring).
    """

    fleet: str
    key: bytes
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    _used: dict[str, dict[str, Any]] = field(default_factory=dict)
    memo: CacheMemo | None = None

    @classmethod
    def load(
        cls,
        store: ObjectStore,
        fleet: str,
        fleet_secret: bytes | None,
        memo: CacheMemo | None = None,
    ) -> ReportCache | None:
        """Read the fleet's cache; None without a fleet secret (nothing can be trusted).

        A missing, unreadable or malformed document is an empty cache (logged when it
        exists but cannot be used). memo: this process's last cache document (CacheMemo),
        reused when the store still holds that version, and kept up to date. Never raises.
        """
        if fleet_secret is None:
            return None
        cache = cls(fleet, cache_key(fleet_secret, fleet), memo=memo)
        try:
            blob = store.get(report_cache_key(fleet))
            if memo is not None and memo.version and memo.version == blob.version:
                cache.entries = memo.entries
                return cache
            header_line, _, body = blob.data.partition(b"\n")
            header = orjson.loads(header_line)
            if header.get("format") != CACHE_FORMAT:
                return cache
            if not hmac.compare_digest(str(header.get("mac")), _mac(cache.key, body)):
                log.warning("report cache has a bad MAC (another secret, or tampered): ignored")
                return cache
            entries = orjson.loads(body)
            if not isinstance(entries, dict):
                return cache
            # The MAC matched: this is a document navarch wrote (str keys, dict entries),
            # used as parsed; lookup() still checks each entry it reads.
            cache.entries = entries
            if memo is not None:
                memo.version, memo.entries = blob.version, cache.entries
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - any failure only costs a full verification
            log.info("report cache not used: %s", exc)
        return cache

    def lookup(self, object_key: str, version: str, rules: str) -> ReportSummary | None:
        """The verified summary of `object_key` at store `version` under `rules`, or None
        (no entry, another version or rules, an entry that does not decode)."""
        entry = self.entries.get(object_key)
        if (
            not isinstance(entry, dict)
            or entry.get("version") != version
            or entry.get("rules") != rules
        ):
            return None
        summary = entry.get("summary")
        if not isinstance(summary, dict):
            return None
        try:
            decoded = summary_from_json(summary)
        except (KeyError, ValueError, TypeError):
            return None
        self._used[object_key] = entry
        return decoded

    def remember(self, object_key: str, version: str, rules: str, summary: ReportSummary) -> None:
        """Record the summary this run verified for `object_key` at `version`."""
        doc = summary_to_json(summary)
        assert doc is not None
        doc = orjson.loads(orjson.dumps(doc))  # the JSON form, as a loaded entry holds it
        self._used[object_key] = {"version": version, "rules": rules, "summary": doc}

    def save(self, store: ObjectStore) -> bool:
        """Write the entries this run used or made, when they differ from those loaded
        (reports no longer listed, or whose version Memory now holds, are dropped) ->
        whether it wrote. A store error is logged, never raised: the cache only ever saves
        time."""
        if self._used == self.entries:
            return False
        body = orjson.dumps(self._used, option=orjson.OPT_SORT_KEYS)
        header = orjson.dumps({"format": CACHE_FORMAT, "mac": _mac(self.key, body)})
        data = header + b"\n" + body
        try:
            version = store.put(report_cache_key(self.fleet), data)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.info("report cache not written (a read-only plan role?): %s", exc)
            return False
        self.entries = dict(self._used)
        if self.memo is not None:
            self.memo.version, self.memo.entries = version, self.entries
        return True
