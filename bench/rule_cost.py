"""Benchmark: a health rule at the cost bound on a 256-XID report, and the lease renewal
thread's longest gap while rules run.

    python bench/rule_cost.py [--reports N]

The rule is eight exists() over xids (navarch.fleet.policy.RULE_COST_MAX), none matching, so
every one visits all 256 XIDs. A background thread wakes every 10 ms, as the lease's
renewal would, and records its longest gap while N reports are judged one after another.
Prints one line: ``rule_ms_median=X rule_ms_max=Y heartbeat_gap_ms_max=Z``. Target (the
issue's): a rule at the bound under 50 ms; the heartbeat gap stays far below a lease's
renewal interval (a third of lock_ttl, at least 1 s).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from navarch.fleet.policy import SAMPLE_REPORT, compile_rule, evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reports", type=int, default=200)
    args = parser.parse_args()
    when = " || ".join(f"xids.exists(x, x.code == {c})" for c in range(8))
    rule = compile_rule("bound", when, "degraded")
    xid = SAMPLE_REPORT["xids"][0]
    report = {
        **SAMPLE_REPORT,
        "status": "healthy",
        "gpus": [],
        "xids": [{**xid, "code": 1000 + i, "severity": "warning"} for i in range(256)],
    }
    stop = threading.Event()
    gaps: list[float] = []

    def heartbeat() -> None:
        last = time.perf_counter()
        while not stop.wait(0.01):
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    times: list[float] = []
    for _ in range(args.reports):
        start = time.perf_counter()
        evaluate(((rule,),), report)
        times.append(time.perf_counter() - start)
    stop.set()
    beat.join()
    print(
        f"rule_ms_median={statistics.median(times) * 1000:.2f} "
        f"rule_ms_max={max(times) * 1000:.2f} "
        f"heartbeat_gap_ms_max={max(gaps, default=0.0) * 1000:.1f}"
    )


if __name__ == "__main__":
    main()
