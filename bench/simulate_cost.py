"""What a simulation costs: CPU seconds, peak memory and the engine's counts of one
`navarch simulate` run of a steady-state fleet (the 100- or 1,000-node fleet of
examples/simulate), with or without warm spares and event-started runs.

    python bench/simulate_cost.py --nodes 100 --days 1 --spares 2
    python bench/simulate_cost.py --nodes 1000 --days 30 --spares 2 --events

The scenario is composed here (steady-state.yaml's settings: the Llama 3 rate, lemons on,
the product's defaults) and written beside the shipped fleet files, so the fleets are the
shipped ones. CPU is the process's user + system time around simulate() alone; the
engine block counts runs executed, agent checks run, reports written and heartbeats
accounted (navarch.simulate.heartbeats). The 1,000-node month's figures, before and after
heartbeats were accounted and runs followed events, are in README.md ("What to expect").
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navarch.simulate.engine import simulate  # noqa: E402
from navarch.simulate.scenario import load_scenario  # noqa: E402


def _scenario(nodes: int, days: float, spares: int, events: bool, rate: float, seed: int) -> Path:
    """A steady-state scenario file over the shipped fleet of `nodes` nodes."""
    fleet = ROOT / "examples" / "simulate" / f"fleet-{nodes}.yaml"
    if not fleet.exists():
        raise SystemExit(f"no shipped fleet of {nodes} nodes: {fleet}")
    doc: dict[str, object] = {
        "name": f"bench-{nodes}-{days}d-spares{spares}{'-events' if events else ''}",
        "fleet": str(fleet),
        "duration": f"{int(days * 86400)}s",
        "reconcile_period": "1m",
        "agent_period": "30s",
        "heartbeat": "5m",
        "seed": seed,
        "world": {"lemons": {"fraction": 0.012}, "failure_rate_per_node_day": rate},
    }
    if spares:
        doc["pool"] = {"spares": spares}
    if events:
        doc["events"] = {}
    path = Path(tempfile.mkdtemp(prefix="navarch-simcost-")) / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100, help="100 or 1000 (a shipped fleet)")
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--spares", type=int, default=0)
    ap.add_argument("--events", action="store_true", help="event-started runs")
    ap.add_argument("--rate", type=float, default=3.8e-3, help="faults per node-day")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lazy", choices=["yes", "no"], default="yes")
    args = ap.parse_args()
    scenario = load_scenario(
        _scenario(args.nodes, args.days, args.spares, args.events, args.rate, args.seed)
    )
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    doc = simulate(scenario, lazy=args.lazy == "yes")
    wall_s = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {
        "scenario": doc["scenario"],
        "cpu_s": round(cpu_s, 2),
        "wall_s": round(wall_s, 2),
        "peak_rss_mb": round(after.ru_maxrss / 1024, 1),
        "engine": doc["engine"],
        "faults": doc["faults"],
        "availability": doc["availability"],
        "wrongful_terminations": doc["wrongful_terminations"],
        "p95_fault_to_serving_s": doc["p95_fault_to_serving_s"],
        "spare_refill_s": doc["spare_refill_s"],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
