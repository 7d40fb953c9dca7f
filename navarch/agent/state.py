"""The agent's state file: what one run hands the next.

Holds the report sequence, the last report written (when, and its change digest: the
agent writes on change or heartbeat), each fault's consecutive checks, the kernel-log position (journal cursor, kmsg sequence or text
file offset), counter baselines per GPU UUID (for rates), this boot's latched XID events,
the boots in which each kind of fault was seen (reported as boots_seen), and the network
checks' port states, counter buckets and held faults (navarch.agent.network).

Written atomically (temporary file in the same directory, fsync, ``os.replace``), so a
reader sees the old or the new state, never a mix. A missing or corrupt file is never
fatal: the agent starts from an empty state and says so in its log.

Sequence after a lost state: the next sequence is
``max(last sequence in the node's previous report + 1 (when the store can be read),
unix time in milliseconds)``. Reports are at most one per run and runs are far more than
a millisecond apart, so a normal run's ``previous + 1`` never overtakes wall-clock
milliseconds: a sequence restarted from the clock is above every sequence the node wrote
before (assuming the clock does not step back by more than the number of runs since).

Sequence after a state that could not be saved (read-only or full disk):
the file on disk is stale, so every run takes the larger of the state's sequence + 1 and
the stored report's + 1 (navarch.agent.runner.next_sequence), and a run whose save fails
takes the clock floor as well (runner.persist_state). Either alone keeps the sequence
rising; together they cover a store that cannot be read back while the disk is full.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["AgentState", "load_state", "save_state", "STATE_VERSION", "FAULT_LOOKBACK_S"]

STATE_VERSION = 1
#: How long the agent remembers the boots a fault was seen in (gpud's 3-day look-back);
#: reported as facts (boots_seen), never acted on by the node.
FAULT_LOOKBACK_S = 3 * 24 * 3600
_MAX_EVENTS = 256
_MAX_BOOTS_PER_FAULT = 16


@dataclass(frozen=True)
class AgentState:
    """Decoded state. All mappings are JSON-able; see the module docstring for meaning.

    kernel_log: {"source": str, "boot_id": str, "position": {...}}
    events: serialized XID events of ``boot_id`` (latched until the boot changes)
    faults: fault kind -> {boot_id: first seen, unix seconds}
    counters: gpu uuid -> {"boot_id": str, "at_s": float, "values": {name: int},
              "slowdown": [bool, ...]}
    streaks: fault id ("kind" or "kind@gpu") -> consecutive checks of this boot that saw it
    written: the last report written: {"at_s": float, "change": str (its change digest,
              navarch.agent.runner.change_digest)}; empty before the first write
    nvml_errors: runs in a row of this boot whose NVML start failed with a transient error
              (navarch.agent.checks.is_transient); 0 after a run that started it
    acceptance: this boot's acceptance run (navarch.report.acceptance.AcceptanceRun.to_json);
              empty when none ran (navarch.agent.acceptance)
    host_signals: this boot's host signals (navarch.agent.host_signals.evaluate): counted
              occurrences per kind within their windows, latched kinds, AER baselines
    network: navarch.agent.network.network_checks's block: {"ports": {port: {"up",
              "counted", "link_downed", "flips"}}, "counters": {"<port> <counter>": {"value",
              "tokens", "at_s"}}, "sticky": {kind: {"until_s", "seen_s", "check"}}}
    """

    sequence: int = 0
    boot_id: str | None = None
    kernel_log: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[Mapping[str, Any], ...] = ()
    faults: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    counters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    streaks: Mapping[str, int] = field(default_factory=dict)
    written: Mapping[str, Any] = field(default_factory=dict)
    acceptance: Mapping[str, Any] = field(default_factory=dict)
    host_signals: Mapping[str, Any] = field(default_factory=dict)
    nvml_errors: int = 0
    network: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        extra = {"nvml_errors": self.nvml_errors} if self.nvml_errors else {}
        return {
            **extra,
            "version": STATE_VERSION,
            "sequence": self.sequence,
            "boot_id": self.boot_id,
            "kernel_log": dict(self.kernel_log),
            "events": [dict(e) for e in self.events[-_MAX_EVENTS:]],
            "faults": {k: dict(v) for k, v in self.faults.items()},
            "counters": {k: dict(v) for k, v in self.counters.items()},
            "streaks": dict(self.streaks),
            "written": dict(self.written),
            "acceptance": dict(self.acceptance),
            "host_signals": dict(self.host_signals),
            "network": dict(self.network),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AgentState:
        """Decode; raises ValueError / TypeError / KeyError on a malformed document."""
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported state version {doc.get('version')!r}")
        seq = doc["sequence"]
        if not isinstance(seq, int) or seq < 0:
            raise ValueError("sequence must be a non-negative integer")
        faults = {
            str(k): {str(b): float(t) for b, t in dict(v).items()}
            for k, v in dict(doc.get("faults", {})).items()
        }
        return cls(
            sequence=seq,
            boot_id=doc.get("boot_id"),
            kernel_log=dict(doc.get("kernel_log") or {}),
            events=tuple(dict(e) for e in doc.get("events") or ()),
            faults=faults,
            counters={str(k): dict(v) for k, v in dict(doc.get("counters") or {}).items()},
            streaks={str(k): int(v) for k, v in dict(doc.get("streaks") or {}).items()},
            written=dict(doc.get("written") or {}),
            acceptance=dict(doc.get("acceptance") or {}),
            host_signals=dict(doc.get("host_signals") or {}),
            nvml_errors=int(doc.get("nvml_errors") or 0),
            network=dict(doc.get("network") or {}),
        )


def load_state(path: str | os.PathLike[str]) -> tuple[AgentState, str | None]:
    """Read the state file.

    Returns (state, problem): problem is None when the file was read, else "missing" or
    "corrupt: <why>" and state is empty. Never raises for a bad file (only the caller can
    decide how to rebuild the sequence, see the module docstring).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return AgentState(), "missing"
    except OSError as exc:
        return AgentState(), f"corrupt: {exc}"
    try:
        return AgentState.from_dict(json.loads(text)), None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return AgentState(), f"corrupt: {exc}"


def save_state(path: str | os.PathLike[str], state: AgentState) -> None:
    """Write state atomically (temp file + fsync + os.replace). Raises OSError on failure."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(state.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def prune_faults(
    faults: Mapping[str, Mapping[str, float]], now: datetime
) -> dict[str, dict[str, float]]:
    """Drop fault sightings older than FAULT_LOOKBACK_S (gpud: 3 days) and cap each key."""
    cutoff = (now - timedelta(seconds=FAULT_LOOKBACK_S)).timestamp()
    out: dict[str, dict[str, float]] = {}
    for key, boots in faults.items():
        kept = sorted(((b, t) for b, t in boots.items() if t >= cutoff), key=lambda bt: bt[1])
        if kept:
            out[key] = dict(kept[-_MAX_BOOTS_PER_FAULT:])
    return out
