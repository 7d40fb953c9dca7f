"""Event-started runs in the simulator: the store's notifications (S3 -> SQS, GCS ->
Pub/Sub, Azure Blob -> Event Grid) as a delivery delay, lost events and coalescing, so
fault -> cordon and fault -> serving can be compared with and without them.

A report write that changed the report (not a heartbeat) becomes an event, and so does a
change of the cloud's own status of a node (a dead host listed impaired: the clouds'
instance events, docs/events.md); a share of events is lost; the rest arrive after a
lognormal delay. The reconciler drains as the
shipped runner does (navarch.events.runner.drain): after a message it polls again for
poll_window_s (its settle_s), and the one run starts once a poll comes back empty, so a
burst of messages less than a window apart is one run. Periodic runs stay, so a lost
event costs at most one period. The figures and assumptions are in
navarch.simulate.scenario (EVENT_*).
"""

from __future__ import annotations

import bisect
import math

from navarch.simulate.scenario import EventPath
from navarch.simulate.world import SimNode, World


class EventRuns:
    """Schedules the runs events start: the World's on_report hook (see World.run_agent).

    Counts: delivered and lost events, and the runs started. Every delivered event
    schedules an "event_run" check at its arrival + poll_window_s (seconds since the
    start); the engine asks starts_run whether the drain ends there.
    """

    def __init__(self, world: World, path: EventPath) -> None:
        self.world = world
        self.path = path
        self.arrivals: list[float] = []  # delivered, not yet covered by a run (ascending)
        self.delivered = 0
        self.lost = 0
        self.runs = 0

    def on_report(self, n: SimNode) -> None:
        """Node n wrote a changed report now: its event arrives (or is lost); the drain
        that receives it ends poll_window_s after it unless another message comes first."""
        self._message(n, "events")

    def on_cloud_event(self, n: SimNode) -> None:
        """The cloud's status of node n changed now (a dead host listed impaired): the
        cloud's instance event (navarch.events.messages) takes the same path to the queue,
        with the same delay and losses as a report's, and its run is a full one."""
        self._message(n, "cloud-events")

    def _message(self, n: SimNode, stream: str) -> None:
        rng = self.world.stream(stream, n.node)
        lost = rng.random() < self.path.lost_share
        delay_s = rng.lognormvariate(
            math.log(self.path.delivery_median_s), self.path.delivery_sigma
        )
        if lost:
            self.lost += 1
            return
        self.delivered += 1
        arrive = self.world.t + delay_s
        bisect.insort(self.arrivals, arrive)
        self.world.schedule(arrive + self.path.poll_window_s, "event_run", arrive)

    def starts_run(self, arrive: float) -> bool:
        """Whether the drain's empty poll after the message that arrived at `arrive` (now
        = arrive + poll_window_s) starts a run: no later message came within the window,
        and no run covered it yet. A run covers every message that arrived by then."""
        i = bisect.bisect_right(self.arrivals, arrive)
        if i == 0 or self.arrivals[i - 1] != arrive:
            return False  # an earlier run of the same drain took it
        if i < len(self.arrivals) and self.arrivals[i] <= arrive + self.path.poll_window_s:
            return False  # the drain polls on: a later message keeps it open
        del self.arrivals[:i]
        self.runs += 1
        return True
