"""Event-started runs in the simulator: the store's notifications (S3 -> SQS, GCS ->
Pub/Sub, Azure Blob -> Event Grid) as a delivery delay, lost events and coalescing, so
fault -> cordon and fault -> serving can be compared with and without them.

A report write that changed the report (not a heartbeat) becomes an event; a share of
events is lost; the rest arrive after a lognormal delay. The reconciler long-polls: the
first message it receives opens a poll window, and the one run at the window's end
covers every message that arrived in it (one run for a burst). Periodic runs stay, so a
lost event costs at most one period. The figures and assumptions are in
navarch.simulate.scenario (EVENT_*).
"""

from __future__ import annotations

import bisect
import math

from navarch.simulate.scenario import EventPath
from navarch.simulate.world import SimNode, World


class EventRuns:
    """Schedules the runs events start: the World's on_report hook (see World.run_agent).

    Counts: delivered and lost events, and the runs scheduled; `at` holds the run times
    (seconds since the start, ascending) the engine pops as "event_run".
    """

    def __init__(self, world: World, path: EventPath) -> None:
        self.world = world
        self.path = path
        self.at: list[float] = []
        self.delivered = 0
        self.lost = 0
        self.runs = 0

    def on_report(self, n: SimNode) -> None:
        """Node n wrote a changed report now: its event arrives (or is lost); a run is
        scheduled at the end of the poll window its arrival opens, unless a run already
        scheduled within a window of it covers it."""
        rng = self.world.stream("events", n.node)
        lost = rng.random() < self.path.lost_share
        delay_s = rng.lognormvariate(
            math.log(self.path.delivery_median_s), self.path.delivery_sigma
        )
        if lost:
            self.lost += 1
            return
        self.delivered += 1
        arrive = self.world.t + delay_s
        i = bisect.bisect_left(self.at, arrive)
        if i < len(self.at) and self.at[i] - arrive <= self.path.poll_window_s:
            return  # the window already open takes it into its run
        run_at = arrive + self.path.poll_window_s
        bisect.insort(self.at, run_at)
        self.runs += 1
        self.world.schedule(run_at, "event_run", self.runs)
