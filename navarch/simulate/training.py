"""What a training team feels: the effective training time ratio (ETTR) of one synchronous
job that spans the pool, as the Llama 3 report (">90 % effective training time") and
ByteDance's ByteRobust (arXiv 2509.16293: 97 % ETTR) state theirs.

The job runs only while the pool serves its full size; a fault on a node it runs on, or
the pool falling below its size, stops it, and the work since its last checkpoint is
lost; each start (the first, and every restart) spends ``restart_s`` loading the last
checkpoint before it makes progress again. Checkpoints come every
``checkpoint_interval_s`` of progress. The ratio is the progress kept over the wall time
measured; its inputs are the scenario's ``training:`` settings (docs/simulate.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def effective_training_time_ratio(
    full_spans: Sequence[tuple[float, float]],
    interrupts: Sequence[float],
    window: tuple[float, float],
    checkpoint_interval_s: float,
    restart_s: float,
) -> float | None:
    """Progress kept / wall time of `window` (start_s, end_s), 0..1; None for an empty window.

    full_spans: disjoint (start_s, end_s) spells in which the pool serves its full size,
    in time order (seconds since the simulation's start); interrupts: when a fault struck
    a node the job ran on (seconds). An attempt starts at a spell's start or at an
    interrupt inside a spell and ends at the next interrupt or the spell's end; it keeps
    whole checkpoint intervals of the progress it made after restart_s, except that an
    attempt still running at the window's end keeps all of its progress (the end of a
    measurement is no failure). Raises ValueError for a checkpoint interval <= 0.
    """
    if checkpoint_interval_s <= 0:
        raise ValueError(f"checkpoint interval must be > 0 s, got {checkpoint_interval_s}")
    start_s, end_s = window
    if end_s <= start_s:
        return None
    cuts = sorted(interrupts)
    kept = 0.0
    for span_start, span_end in full_spans:
        lo, hi = max(span_start, start_s), min(span_end, end_s)
        if hi <= lo:
            continue
        bounds = [lo, *(t for t in cuts if lo < t < hi), hi]
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            progress = max(0.0, b - a - restart_s)
            last = i == len(bounds) - 2
            if last and hi == end_s and span_end >= end_s:
                kept += progress
            else:
                kept += math.floor(progress / checkpoint_interval_s) * checkpoint_interval_s
    return round(kept / (end_s - start_s), 6)
