"""The fault -> serving floor that the simulator's world model leaves a policy.

    python bench/serving_floor.py [--draws 200000] [--seed 1]

Draws faults from the world model's own tables (navarch.simulate.scenario: the Llama 3
cause mix, the cure table, launch, boot, drain and impairment times) and adds up the
times along the path each policy takes, no planner involved:

- floor: navarch acts the instant a fact exists (no agent check or reconcile wait), so
  what is left is the world's own time: drains, boots, launches. No planner can beat it.
- cadence: the product's defaults add their waits: a check every AGENT_PERIOD_S (a fault
  shows at the next one; a non-fatal fault needs UNHEALTHY_AFTER checks), a run every
  RECONCILE_PERIOD_S (each fact waits for the next one), RETURN_AFTER healthy checks.

Policies: reboot first (`remediation: [reboot, replace]`, no surge for an in-place rung:
the defaults) and replace only (`remediation: [replace]`). A surge replacement launches
at the cordon; a reboot waits for the drain; a reboot that does not cure is replaced when
the fault shows again in the new boot. Prints p50 and p95 per policy and setting, in
minutes; last line: `floor_p95_reboot_first_min=... cadence_p95_reboot_first_min=...
floor_p95_replace_only_min=... cadence_p95_replace_only_min=...`.

What it leaves out makes the floor lower, never higher: lemons, failed launches, launches
that never boot, capacity
and the checkpointing job's drain on a replaced node (a surge overlaps it).
"""

from __future__ import annotations

import argparse
import math
import random

from navarch.simulate.scenario import (
    BOOT_MEDIAN_S,
    BOOT_SIGMA,
    CHECKPOINT_FRACTION,
    CHECKPOINT_S,
    CURES,
    DEFAULT_CAUSES,
    DRAIN_GRACE_S,
    IMPAIR_S,
    LAUNCH_S,
)
from navarch.simulate.world import ECC_XIDS

AGENT_PERIOD_S = 30
RECONCILE_PERIOD_S = 60
UNHEALTHY_AFTER = 2
RETURN_AFTER = 3
#: Causes the agent reports as a fatal XID: acted on at the first report.
FATAL = ("xid79", "hbm_ecc")


def fault_path_s(rng: random.Random, reboot_first: bool, cadence: bool) -> float:
    """Seconds from one drawn fault to serving again along the policy's path."""
    causes = {c: w for c, w in DEFAULT_CAUSES.items() if c != "software"}
    cause = rng.choices(list(causes), list(causes.values()))[0]
    key = {"xid79": "xid79:79", "hbm_ecc": f"hbm_ecc:{rng.choice(ECC_XIDS)}"}.get(cause, cause)

    def wait(period_s: int) -> float:
        return rng.uniform(0, period_s) if cadence else 0.0

    def seen() -> float:  # the fault shows in a report, and a run acts on it
        checks = 0 if cause in FATAL else UNHEALTHY_AFTER - 1
        return wait(AGENT_PERIOD_S) + checks * AGENT_PERIOD_S * cadence + wait(RECONCILE_PERIOD_S)

    def boot() -> float:  # the world's lognormal boot (navarch.simulate.scenario)
        return rng.lognormvariate(math.log(BOOT_MEDIAN_S), BOOT_SIGMA)

    def replacement() -> float:  # launched now, serving at its first report
        return rng.uniform(*LAUNCH_S) + boot() + wait(AGENT_PERIOD_S)

    if cause == "host_down":
        return rng.uniform(*IMPAIR_S) + wait(RECONCILE_PERIOD_S) + replacement()
    cure_p = CURES.get(key, {}).get("reboot", 0.0)
    if not reboot_first or cure_p == 0.0:
        return seen() + replacement()
    drain_s = DRAIN_GRACE_S
    if rng.random() < CHECKPOINT_FRACTION:
        drain_s += rng.uniform(*CHECKPOINT_S)
    t = seen() + drain_s + wait(RECONCILE_PERIOD_S) + boot()
    if rng.random() < cure_p:
        return t + wait(AGENT_PERIOD_S) + (RETURN_AFTER - 1) * AGENT_PERIOD_S * cadence
    return t + seen() + replacement()


def percentiles_min(
    rng: random.Random, reboot_first: bool, cadence: bool, n: int
) -> tuple[float, float]:
    """(p50, p95) of n drawn faults' fault -> serving, in minutes."""
    xs = sorted(fault_path_s(rng, reboot_first, cadence) for _ in range(n))
    return xs[n // 2] / 60, xs[int(n * 0.95)] / 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    figures: dict[str, float] = {}
    for policy, reboot_first in (("reboot_first", True), ("replace_only", False)):
        for setting, cadence in (("floor", False), ("cadence", True)):
            rng = random.Random(f"{args.seed}:{policy}:{setting}")
            p50, p95 = percentiles_min(rng, reboot_first, cadence, args.draws)
            figures[f"{setting}_p95_{policy}_min"] = p95
            print(
                f"{policy:13s} {setting:8s} fault -> serving p50 {p50:5.1f} min  p95 {p95:5.1f} min"
            )
    print(" ".join(f"{k}={v:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
