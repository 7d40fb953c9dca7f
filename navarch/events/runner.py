"""Runs started by the store's notifications: drain, coalesce, apply, then delete.

One event-started run:

1. drain: wait (a long poll, at most `wait_s`) for the first message, then keep taking
   what is queued, in short polls of `settle_s`, until a poll comes back empty or
   `max_messages` are held: a burst of reports written in the same seconds (a rack losing
   power, a bad driver rolled out) becomes one batch and so one run;
2. apply with the usual lease (a full run when a cloud's instance event is in the batch:
   a dead host writes no report, its cloud announces it), naming the batch's report keys (only they are read while
   every other report is fresh: navarch.reconcile.named_reports; when every one is a plain
   heartbeat the run is partial and lists no cloud: navarch.reconcile.quiet_run);
3. delete the batch's messages only once the run returned, that is after it saved its
   state. A run that dies first leaves them in the queue: they are delivered again after
   the queue's visibility timeout and cost one run that finds nothing to do.

A batch that names no report (only test events, other prefixes, malformed bodies) starts
no run: its messages are deleted at once and counted by reason.

`listen` is the long-running form (a systemd service, a Kubernetes Deployment): events make
a run sooner, and a run still starts every `period_s` without any, so a lost notification
costs at most one period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from navarch.errors import LockHeld, NavarchError, StoreError
from navarch.events.messages import Parsed
from navarch.events.queues import EventQueue, QueueMessage

__all__ = ["Batch", "drain", "listen", "run_batch"]

log = logging.getLogger(__name__)

#: The largest batch one run covers; what is left starts the next run at once.
MAX_BATCH = 1000


@dataclass(frozen=True)
class Batch:
    """Messages drained together and what they name, merged."""

    messages: tuple[QueueMessage, ...] = ()
    parsed: Parsed = Parsed()

    @property
    def keys(self) -> tuple[str, ...]:
        """The report keys the batch names (sorted, distinct)."""
        return self.parsed.keys

    def __add__(self, other: Batch) -> Batch:
        return Batch(self.messages + other.messages, self.parsed + other.parsed)


def drain(
    queue: EventQueue, *, wait_s: float, settle_s: float = 2.0, max_messages: int = MAX_BATCH
) -> Batch:
    """Wait up to wait_s for a message, then take what follows within settle_s of the
    last poll -> the batch (empty when nothing came). A message received again while
    held (its visibility ran out) ends the drain: it is the same message, its newest
    receipt kept. Raises StoreError from the queue."""
    held: dict[str, QueueMessage] = {}
    got = queue.receive(wait_s, min(max_messages, 10))
    while got:
        fresh = [m for m in got if m.id not in held]
        held.update((m.id, m) for m in got)
        if not fresh or len(held) >= max_messages:
            break
        got = queue.receive(settle_s, min(max_messages - len(held), 10))
    messages = list(held.values())
    parsed = Parsed()
    for m in messages:
        parsed = parsed + m.parsed
    return Batch(tuple(messages), parsed)


#: One apply: called with the report keys the run was started for (None: a periodic run
#: that lists every report) -> the command's exit code. It returns only after the run
#: saved its state; it raises NavarchError when the run did not happen.
ApplyOnce = Callable[[tuple[str, ...] | None], int]


def run_batch(queue: EventQueue, batch: Batch, apply_once: ApplyOnce, *, full: bool) -> int:
    """Apply once for batch, then delete its messages -> the apply's exit code (0 and no
    run when the batch names no report, no instance, and full is False).

    full: a periodic run (the CronJob draining what came since its last run): it lists
    every report whatever the batch names. The messages stay queued when apply_once
    raises (the run did not save its state); the error propagates.
    """
    if batch.parsed.ignored:
        log.info("event queue %s: ignored %s", queue.url, batch.parsed.ignored_text())
    code = 0
    if full or batch.keys or batch.parsed.instances:
        code = apply_once(None if full else batch.parsed.named)
    try:
        queue.delete(batch.messages)  # only now: the run above returned, its state is saved
    except StoreError as exc:
        # The run is done; undeleted messages come back and cost one run with nothing to do.
        log.warning("event queue %s: messages not deleted, delivered again: %s", queue.url, exc)
    return code


def listen(
    queue: EventQueue,
    apply_once: ApplyOnce,
    *,
    period_s: float,
    wait_s: float = 20.0,
    settle_s: float = 2.0,
    retry_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Serve the queue until stop() is true -> the last run's exit code.

    A run starts when a batch names reports, and every period_s without one (a full
    listing). A run that could not take the lease (another run holds it) keeps its batch
    and is tried again after retry_s; any other NavarchError is logged and the batch is
    left to be delivered again. Raises nothing but what apply_once raises outside
    NavarchError.
    """
    code = 0
    pending = Batch()
    next_full = clock()  # the first run lists everything: a service starting cold
    while not stop():
        wait = max(0.0, min(wait_s, next_full - clock()))
        try:
            pending = pending + drain(queue, wait_s=wait, settle_s=settle_s)
            full = clock() >= next_full
            if not pending.messages and not full:
                continue
            code = run_batch(queue, pending, apply_once, full=full)
            pending = Batch()
            if full:
                next_full = clock() + period_s
        except LockHeld as exc:
            log.info("event run waits for the lease: %s", exc)
            time.sleep(retry_s)
        except NavarchError as exc:
            log.warning("event run failed (its messages are delivered again): %s", exc)
            pending = Batch()
            time.sleep(retry_s)
    return code
