"""Send one apply's events to the fleet's sinks (fleet.yaml notify:).

notify_run() derives the events (navarch.notify.events), compares this run's conditions
with the active ones (navarch.notify.state: state/<fleet>.notify.json, compare-and-swap),
sends each sink the events it accepts, and saves the new active set. Nothing here raises
into the apply: a failed sink, an unreadable secret or a store error is logged (sink name
and reason, never a secret) and returned as a failed Delivery, so the apply's exit code
is the same with or without notifications.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime

from navarch.errors import NavarchError
from navarch.fleet.spec import FleetSpec, SinkSpec
from navarch.notify.events import (
    Event,
    events_from_error,
    outcome_conditions,
    outcome_events,
    plan_conditions,
)
from navarch.notify.reserved import idle_conditions
from navarch.notify.sinks import accepts, open_sink
from navarch.notify.state import NotifyState, commit, load_state, transition
from navarch.outcome import RunResult
from navarch.stores.base import ObjectStore
from navarch.textsafe import counted

log = logging.getLogger("navarch.notify")


@dataclass(frozen=True)
class Delivery:
    """What one sink did with this run's events: events offered, requests/lines sent, ok,
    and the error (sink name and reason; never a secret) when it failed."""

    sink: str
    type: str
    events: int
    sent: int
    ok: bool
    error: str | None = None


def run_events(
    spec: FleetSpec, result: RunResult | None, error: BaseException | None, run_id: str
) -> tuple[tuple[Event, ...], dict[str, Event], bool]:
    """(one-off events, this run's conditions, complete) from an RunResult or an error.

    result: the run's plan and outcomes, or None when the apply
    raised `error`. complete: the run saw every pool's halts (it finished).
    """
    if result is not None:
        one_off = outcome_events(spec.name, run_id, result.outcomes)
        current = {
            **plan_conditions(result.plan, run_id),
            **outcome_conditions(spec.name, run_id, result.outcomes),
        }
        return one_off, current, True
    assert error is not None
    events = events_from_error(spec.name, error, run_id)
    return (
        tuple(e for e in events if e.condition is None),
        {e.condition: e for e in events if e.condition is not None},
        False,
    )


def notify_run(
    spec: FleetSpec,
    store: ObjectStore,
    *,
    now: datetime,
    run_id: str,
    result: RunResult | None = None,
    error: BaseException | None = None,
    pools: frozenset[str] | None = None,
) -> tuple[Delivery, ...]:
    """Send this apply's events to every sink -> one Delivery per sink that had any.

    Give result (an RunResult) or error (what the apply raised). pools: the pools a
    --pool run looked at (None: all). Never raises: failures are logged and returned.
    """
    if not spec.notify:
        return ()
    try:
        previous = load_state(store, spec.name)
    except NavarchError as exc:
        log.warning("cannot read the notifier state (%s); conditions may repeat", exc)
        previous = NotifyState({}, {}, None)
    one_off, current, complete = run_events(spec, result, error, run_id)
    idle_since = previous.idle_since
    if result is not None:
        idle, idle_since = idle_conditions(
            spec.name,
            result.reservations,
            previous.idle_since,
            now,
            spec.reservation_idle_after_s,
            run_id,
        )
        current = {**current, **idle}
    changes, state = transition(previous, current, now, run_id, complete=complete, pools=pools)
    state = replace(state, idle_since=idle_since)
    # Every event carries the time it happened: the run's clock, one value for the run.
    events = tuple(replace(e, time=now) for e in one_off + changes)
    deliveries = _deliver(spec, events) if events else ()
    if set(state.active) != set(previous.active) or state.idle_since != previous.idle_since:
        problem = commit(store, spec.name, state)
        if problem:
            log.warning("%s", problem)
    return deliveries


def notify_events(
    spec: FleetSpec, events: tuple[Event, ...], *, now: datetime
) -> tuple[Delivery, ...]:
    """Send one-off events made outside an apply (an operator's cordon) to the sinks that
    accept them, each stamped with `now` (aware UTC); the conditions' state is neither
    read nor written. Never raises: failures are logged and returned."""
    if not spec.notify or not events:
        return ()
    return _deliver(spec, tuple(replace(e, time=now) for e in events))


def _deliver(spec: FleetSpec, events: tuple[Event, ...]) -> tuple[Delivery, ...]:
    """Every sink on its own thread (one slow sink does not add to another's time)."""
    jobs = []
    for index, sink_spec in enumerate(spec.notify):
        mine = tuple(e for e in events if accepts(sink_spec, e))
        if mine:
            jobs.append((index, sink_spec, mine))
    if not jobs:
        return ()

    def one(job: tuple[int, SinkSpec, tuple[Event, ...]]) -> Delivery:
        index, sink_spec, mine = job
        try:
            sent = open_sink(sink_spec, spec.base_dir, index).send(mine)
        except NavarchError as exc:
            log.warning("notification to sink %s failed: %s", sink_spec.name, exc)
            return Delivery(sink_spec.name, sink_spec.type, len(mine), 0, False, str(exc))
        except Exception as exc:  # noqa: BLE001 - a sink bug must not fail the apply
            log.warning("notification to sink %s failed: %s", sink_spec.name, type(exc).__name__)
            return Delivery(sink_spec.name, sink_spec.type, len(mine), 0, False, type(exc).__name__)
        log.info("sent %s to sink %s", counted(len(mine), "event"), sink_spec.name)
        return Delivery(sink_spec.name, sink_spec.type, len(mine), sent, True)

    with ThreadPoolExecutor(max_workers=min(len(jobs), 8)) as pool:
        return tuple(pool.map(one, jobs))
