"""Benchmark: `navarch history` on a year of audit chunks of a 1,000-node fleet.

    python bench/history.py [--records N] [--nodes N] [--days N]

Writes N audit records (default 100,000; 4 per chunk, as small applies write them) for
a fleet of 1,000 nodes spread evenly over 365 days into a file:// store, with a state
document naming every node, then times a one-node 24 h query three ways: in process
(navarch.history.read_history), as the CLI (`python -m navarch history FLEET NODE`, a
fresh process: interpreter start-up included) and, for scale, one listing of the whole
audit log (what a reader without the day index would have to walk). Prints one line per
figure and, last, ``query_s=X cli_s=Y full_list_s=Z chunks_read=N``. Target: the query
under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from navarch.history import read_history  # noqa: E402
from navarch.planner.model import Memory, NodeMemory  # noqa: E402
from navarch.reconcile.state import load_memory, save_memory  # noqa: E402
from navarch.stores.file import FileStore  # noqa: E402

FLEET = "demo"
NOW = datetime(2026, 12, 31, 12, 0, tzinfo=UTC)
PER_CHUNK = 4


def _record(when: datetime, node: str, run_id: str, i: int) -> dict[str, object]:
    action = ("cordon", "drain", "reboot", "uncordon")[i % 4]
    return {
        "time": when.isoformat().replace("+00:00", "Z"),
        "run_id": run_id,
        "action": action,
        "pool": "train",
        "node": node,
        "instance_id": f"i-{node}",
        "reason": "XID 79: GPU has fallen off the bus",
        "ok": True,
        "detail": "done",
        "error": None,
        "actor": "scheduled",
        "report": {"sequence": i, "status": "unhealthy", "boot_id": "b"},
        "fault": "XID 79",
        "rung": "reboot",
    }


def populate(root: Path, records: int, nodes: int, days: int) -> tuple[FileStore, str]:
    """Write the audit log and state; returns (store, the node queried)."""
    store = FileStore(root)
    names = [f"{FLEET}-train-{i:04d}" for i in range(1, nodes + 1)]
    chunks = records // PER_CHUNK
    start = NOW - timedelta(days=days)
    step_s = days * 86400 / chunks
    n = 0
    for c in range(chunks):
        began = start + timedelta(seconds=c * step_s)
        run_id = f"{began:%Y%m%dT%H%M%SZ}-{c:08x}"
        lines = []
        for k in range(PER_CHUNK):
            lines.append(
                json.dumps(
                    _record(began + timedelta(seconds=k), names[n % nodes], run_id, n),
                    sort_keys=True,
                )
            )
            n += 1
        # Plain files in the store's layout: FileStore.put's fsync per object would make
        # writing a year of chunks take minutes and measures nothing the query does.
        path = root / "events" / FLEET / f"{began:%Y/%m/%d}" / f"{run_id}-0001.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    memory = Memory(
        fleet=FLEET,
        lineage="bench",
        nodes=[NodeMemory(node=name, pool="train", instance_id=f"i-{name}") for name in names],
    )
    save_memory(store, memory, None)
    # The node of the newest chunk: it has records within the last 24 h.
    return store, names[(n - 1) % nodes]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--days", type=int, default=365)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="navarch-bench-history-"))
    try:
        shutil.copy(REPO / "fleet.example.yaml", work / "fleet.yaml")
        t0 = time.perf_counter()
        store, node = populate(work / ".navarch" / "store", args.records, args.nodes, args.days)
        print(
            f"wrote {args.records} records in {args.records // PER_CHUNK} chunks over "
            f"{args.days} days for {args.nodes} nodes in {time.perf_counter() - t0:.1f} s"
        )

        t0 = time.perf_counter()
        memory, _ = load_memory(store, FLEET)
        h = read_history(
            store, FLEET, memory, since=NOW - timedelta(hours=24), until=NOW, node=node
        )
        query_s = time.perf_counter() - t0
        print(
            f"in process: {node}, 24 h: {len(h.events)} events from {h.chunks_read} chunks "
            f"of {len(h.days)} days in {query_s:.3f} s"
        )

        env = {**os.environ, "NAVARCH_NOW": NOW.isoformat(), "PYTHONPATH": str(REPO)}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "navarch", "history", "fleet.yaml", node],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        cli_s = time.perf_counter() - t0
        print(
            f"CLI: navarch history fleet.yaml {node}: {len(proc.stdout.splitlines())} lines "
            f"in {cli_s:.3f} s (a fresh process)"
        )

        t0 = time.perf_counter()
        every = store.list(f"events/{FLEET}/")
        full_s = time.perf_counter() - t0
        print(f"for scale: listing the whole audit log ({len(every)} chunks) takes {full_s:.3f} s")
        print(
            f"query_s={query_s:.3f} cli_s={cli_s:.3f} full_list_s={full_s:.3f} "
            f"chunks_read={h.chunks_read}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
