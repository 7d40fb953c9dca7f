"""Benchmark: plan, apply and status on the embedded local provider, per fleet size.

    python bench/scale.py [--sizes 1000,10000,100000]

For each size N (pools of 1,000 nodes: 1 pool at 1,000, 10 at 10,000, 100 at 100,000), in
a fresh directory, each step in a fresh child process (wall time around the work, after
imports, the rules engine `cel` that navarch imports on first use included; peak RSS of the
child):

1. `navarch apply FLEET --auto-approve`  0 -> N nodes (N local machines, Memory, audit)
2. (not measured) one signed healthy report per node written into the store, built from
   one real agent report (fake GPUs) re-signed per node
3. `navarch plan FLEET --detailed-exitcode`  no-op plan: every report fetched and verified
4. `navarch status FLEET`
5. floor: the I/O a plan cannot avoid, with navarch's own primitives: list the machines
   (LocalProvider.list_instances), list health/<fleet>/, read every report and verify it
   (navarch.reconcile.reports.verify_report: size, parse, schema, signature, sequence), in
   batches of FLOOR_BATCH reports fetched in parallel (the store's get_many)
6. (not measured) CHANGED_PCT of the reports re-signed with the next sequence, as agents
   writing on change or heartbeat between two runs would
7. `navarch plan FLEET --detailed-exitcode`  plan_only: the plan of step 3 left the
   verified-report cache (navarch.reconcile.report_cache), so only the changed reports are
   fetched and verified; the other summaries come from the cache (a fleet where only
   plans have run since the reports were written)
8. (not measured) `navarch apply FLEET --auto-approve`, as the reconciler's cron job runs
   it: nothing to do, every accepted report folded into Memory; then step 6 again
9. `navarch plan FLEET --detailed-exitcode`  incremental: the steady state, a plan after
   the last apply; the unchanged reports' summaries come from Memory, only the changed
   ones are fetched and verified
10. (not measured) `navarch apply FLEET --auto-approve`; then EVENT_REPORTS reports
    re-signed, as ten agents writing on change would, their keys what the store's
    notifications would name
11. event: the apply those notifications start (navarch.api.apply with reports_named, as
    `navarch apply --on-events URL --listen` runs it; the queue's own round trips are not
    in it). The reports are heartbeats (healthy, same boot, nodes in service), so the run
    is partial (navarch.reconcile.quiet_run): only the named reports are listed and
    verified and folded into Memory, no machine is listed, the state is decoded for the
    named nodes only and written back with every other entry as read
12. (not measured) `navarch apply FLEET --auto-approve`; then EVENT_REPORTS other reports
    re-signed unhealthy (XID 79, a GPU fallen off the bus), as ten agents that found a
    fault would write them
13. event_fault: the apply those notifications start. A changed health is not a
    heartbeat, so this run is the full one (machines listed, every node observed and
    planned; the reports not named come from Memory): what an event costs when it matters

Prints one line per step and size (wall and CPU seconds: on a shared machine the CPU time
is the steadier figure), with the ratio of wall times to the 1,000-node figure and (plan)
to the floor; last line:
`plan_ratio_10k=... apply_ratio_10k=... status_ratio_10k=... plan_vs_floor_10k=...
plan_vs_floor_100k=... incremental_vs_floor_10k=... incremental_vs_floor_100k=...
plan_only_vs_floor_10k=... plan_only_vs_floor_100k=... event_vs_floor_10k=...
event_vs_floor_100k=... event_fault_vs_floor_10k=... event_fault_vs_floor_100k=...
rss_mb_100k=...` (n/a for sizes
not run; the vs_floor figures are wall-time ratios; rss_mb_100k is the largest peak RSS of
the 100,000-node steps).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (bench/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
FLEET = "scale"
SECRET = "bench-secret-0123456789abcdef0123"
NODES_PER_POOL = 1000
GPUS = 8
#: Reports the floor fetches at once (get_many), then verifies and drops.
FLOOR_BATCH = 1000
#: Share of the reports that change between the two plans of the incremental case.
CHANGED_PCT = 1
#: Reports whose notifications start the event case's run.
EVENT_REPORTS = 10


def write_fleet(directory: Path, nodes: int) -> Path:
    """fleet.yaml: pools of NODES_PER_POOL nodes on one local provider (yaml library)."""
    import yaml

    (directory / "fleet.secret").write_text(SECRET + "\n")
    pools = max(1, nodes // NODES_PER_POOL)
    per_pool, extra = divmod(nodes, pools)
    doc = {
        "fleet": FLEET,
        "store": "file://store",
        "secret": {"file": "fleet.secret"},
        # The bench measures plans of a whole fleet, its first launch included.
        "safety": {"max_launches_per_run": max(nodes, 1)},
        "providers": {"sim": {"type": "local", "dir": "local"}},
        "pools": {
            f"p{i:03d}": {
                "provider": "sim",
                "instance_types": ["sim-h100x8"],
                "gpus_per_node": GPUS,
                "region": "sim-1",
                "zones": ["sim-1a"],
                "nodes": {
                    "min": 0,
                    "target": per_pool + (i < extra),
                    "max": per_pool + (i < extra),
                },
                # Writing 100,000 reports takes minutes: no report may age past
                # offline_after before the last plan (judged by the store's times).
                "health": {"boot_timeout": "1h", "stale_after": "2h", "offline_after": "4h"},
            }
            for i in range(pools)
        },
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_reports(directory: Path) -> int:
    """One signed healthy report per fleet machine, into the fleet's file store."""
    from navarch.report.signing import derive_node_key, sign
    from navarch.stores.file import FileStore

    template = benchlib.report_template(directory, FLEET, GPUS)
    store = FileStore(directory / "store")
    count = 0
    for d in (directory / "local" / FLEET / "machines").iterdir():
        m = json.loads((d / "machine.json").read_text())
        tags = m["tags"]
        node, pool = tags["navarch-node"], tags["navarch-pool"]
        body = dict(
            template, pool=pool, node=node, instance_id=m["instance_id"], boot_id=m["boot_id"]
        )
        key = derive_node_key(SECRET.encode(), FLEET, node)
        store.put(
            f"health/{FLEET}/{pool}/{node}.json",
            json.dumps(sign(body, key), sort_keys=True).encode(),
        )
        count += 1
    return count


def change_reports(directory: Path, pct: int = CHANGED_PCT) -> int:
    """Re-sign every (100 / pct)-th report with the next sequence -> reports changed."""
    from navarch.report.signing import derive_node_key, sign
    from navarch.stores.file import FileStore

    store = FileStore(directory / "store")
    infos = store.list(f"health/{FLEET}/")
    step = max(1, 100 // pct)
    for info in infos[::step]:
        body = json.loads(store.get(info.key).data)
        body.pop("signature", None)
        body["sequence"] += 1
        key = derive_node_key(SECRET.encode(), FLEET, body["node"])
        store.put(info.key, json.dumps(sign(body, key), sort_keys=True).encode())
    return len(infos[::step])


#: The measured steps, in the order they run and print.
STEPS = ["apply", "plan", "status", "floor", "plan_only", "incremental", "event", "event_fault"]

#: The kernel log line of the event_fault step's reports (NVIDIA XID catalogue: XID 79,
#: GPU has fallen off the bus; a fatal fault the planner cordons on one report).
FAULT_LINE = (
    "[  100.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def change_named_reports(
    directory: Path, count: int = EVENT_REPORTS, offset: int = 0, fault: bool = False
) -> list[str]:
    """Re-sign `count` reports spread over the fleet (starting `offset` reports in) with
    the next sequence -> their keys (what the store's notifications would name), also
    written to events.json. With `fault` each becomes the agent's unhealthy report of an
    XID 79 (FAULT_LINE) on that node's boot."""
    from navarch.report.signing import derive_node_key, sign
    from navarch.stores.file import FileStore

    store = FileStore(directory / "store")
    infos = store.list(f"health/{FLEET}/")
    chosen = infos[offset :: max(1, len(infos) // count)][:count]
    faulty: dict[str, Any] = {}
    if fault:
        (directory / "fault").mkdir(exist_ok=True)
        faulty = benchlib.report_template(directory / "fault", FLEET, GPUS, FAULT_LINE)
    for info in chosen:
        body = json.loads(store.get(info.key).data)
        body.pop("signature", None)
        if faulty:
            keep = ("pool", "node", "instance_id", "boot_id", "sequence")
            body = dict(faulty, **{k: body[k] for k in keep})
        body["sequence"] += 1
        key = derive_node_key(SECRET.encode(), FLEET, body["node"])
        store.put(info.key, json.dumps(sign(body, key), sort_keys=True).encode())
    keys = [i.key for i in chosen]
    (directory / "events.json").write_text(json.dumps(keys))
    return keys


def event_apply(fleet_file: str) -> int:
    """The apply the events of events.json start -> its exit code (0: no failed action)."""
    from navarch import api
    from navarch.reconcile.collector import one_shot

    keys = json.loads((Path(fleet_file).parent / "events.json").read_text())
    with one_shot():
        result = api.apply(
            fleet_file, api.ApplyOptions(auto_approve=True, reports_named=frozenset(keys))
        )
    return 1 if result.failed else 0


def floor(fleet_file: str) -> int:
    """List the machines, list the reports, read and verify every one -> reports accepted."""
    from datetime import UTC, datetime

    from navarch.fleet.load import load_fleet
    from navarch.fleet.secret import read_fleet_secret
    from navarch.providers import open_provider
    from navarch.reconcile.reports import _stored_at, verify_report
    from navarch.stores import open_store

    spec = load_fleet(fleet_file)
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    provider = open_provider("sim", spec.providers["sim"], base_dir=spec.base_dir, fleet=spec.name)
    instances = provider.list_instances(spec.name)
    infos = store.list(f"health/{spec.name}/")
    secret = read_fleet_secret(spec)
    now = datetime.now(UTC)
    ok = 0
    for start in range(0, len(infos), FLOOR_BATCH):  # batches: the floor holds no more
        batch = infos[start : start + FLOOR_BATCH]  # bytes at once than it needs
        blobs = store.get_many(i.key for i in batch)
        for info in batch:
            _, _, pool, name = info.key.split("/")
            verify_report(
                blobs[info.key].data,
                fleet=spec.name,
                pool=pool,
                node=name[:-5],
                fleet_secret=secret,
                last_sequence=-1,
                now=now,
                stored_at=_stored_at(info),
            )
            ok += 1
    assert ok == len(instances), (ok, len(instances))
    return ok


def child(kind: str, fleet_file: str, out: str) -> None:
    """Run one measured step in this (fresh) process; write its figures to `out`."""
    # Imported before the clock starts, the rules engine navarch imports on first use too
    # (its package pulls in typer and prompt_toolkit: 0.1 s that is import, not work).
    import cel  # noqa: F401

    from navarch import cli
    from navarch.reconcile import run  # noqa: F401

    cli.tune_gc_for_batch()  # the same collector settings as the CLI, the floor included
    sink = io.StringIO()
    start = time.perf_counter()
    cpu_start = _cpu_s()
    with contextlib.redirect_stdout(sink):
        if kind == "floor":
            floor(fleet_file)
            rc = 0
        elif kind in ("event", "event_fault"):
            rc = event_apply(fleet_file)
        else:
            argv = {
                "apply": ["apply", fleet_file, "--auto-approve"],
                "plan": ["plan", fleet_file, "--detailed-exitcode"],
                "plan_only": ["plan", fleet_file, "--detailed-exitcode"],
                "incremental": ["plan", fleet_file, "--detailed-exitcode"],
                "status": ["status", fleet_file],
            }[kind]
            rc = cli.main(argv)
    wall_s = time.perf_counter() - start
    cpu_s = _cpu_s() - cpu_start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    Path(out).write_text(
        json.dumps(
            {
                "rc": rc,
                "wall_s": wall_s,
                "cpu_s": cpu_s,
                "rss_mb": rss_mb,
                "tail": sink.getvalue()[-600:],
            }
        )
    )


def _cpu_s() -> float:
    """CPU seconds (user + system, all threads) this process has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_child(kind: str, fleet: Path) -> dict[str, Any]:
    out = fleet.parent / f"{kind}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--fleet", str(fleet), "--out", str(out)],
        cwd=fleet.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{kind} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(out.read_text())
    if result["rc"] != 0:  # every step is a converged fleet: plan exits 0, not 2
        raise SystemExit(f"{kind} exited {result['rc']}: {proc.stderr[-1500:]}\n{result['tail']}")
    return result


def measure(nodes: int, status: bool = True) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"navarch-scale-{nodes}-") as tmp:
        d = Path(tmp)
        fleet = write_fleet(d, nodes)
        results = {"apply": run_child("apply", fleet)}
        start = time.perf_counter()
        written = write_reports(d)
        assert written == nodes, (written, nodes)
        print(
            f"  [{nodes}] wrote {written} reports ({time.perf_counter() - start:.1f} s, "
            "not measured)",
            flush=True,
        )
        for kind in ("plan", "status", "floor") if status else ("plan", "floor"):
            results[kind] = run_child(kind, fleet)
        changed = change_reports(d)
        print(f"  [{nodes}] changed {changed} reports (not measured)", flush=True)
        results["plan_only"] = run_child("plan_only", fleet)
        run_child("apply", fleet)
        changed = change_reports(d)
        print(f"  [{nodes}] applied, changed {changed} reports (not measured)", flush=True)
        results["incremental"] = run_child("incremental", fleet)
        run_child("apply", fleet)
        named = change_named_reports(d)
        print(f"  [{nodes}] applied, changed {len(named)} named reports (not measured)", flush=True)
        results["event"] = run_child("event", fleet)
        run_child("apply", fleet)
        named = change_named_reports(d, offset=1, fault=True)
        print(
            f"  [{nodes}] applied, {len(named)} named reports unhealthy (not measured)", flush=True
        )
        results["event_fault"] = run_child("event_fault", fleet)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help="comma-separated fleet sizes (nodes); the first is the 1x reference",
    )
    parser.add_argument(
        "--no-status",
        action="store_true",
        help="skip the status step (a quicker run for the plan figures)",
    )
    parser.add_argument(
        "--child",
        choices=STEPS,
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--fleet", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.fleet, args.out)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"navarch scale bench on the local provider; {os.cpu_count()} CPU cores")
    figures: dict[int, dict[str, dict[str, Any]]] = {}
    for n in sizes:
        figures[n] = measure(n, status=not args.no_status)
        ref = figures.get(1000)
        for kind in STEPS:
            if kind not in figures[n]:
                continue
            r = figures[n][kind]
            ratio = f"{r['wall_s'] / ref[kind]['wall_s']:.1f}x of 1k" if ref else "n/a"
            extra = ""
            if kind in ("plan_only", "incremental", "event", "event_fault"):
                fl = figures[n]["floor"]
                extra = (
                    f", {r['wall_s'] / fl['wall_s']:.2f}x the floor "
                    f"(cpu {r['cpu_s'] / fl['cpu_s']:.2f}x)"
                )
            if kind == "plan":
                extra = f", {r['wall_s'] / figures[n]['floor']['wall_s']:.2f}x the floor"
            print(
                f"nodes={n:>6} {kind:11s} wall {r['wall_s']:8.2f} s  cpu {r['cpu_s']:8.2f} s  "
                f"peak RSS {r['rss_mb']:7.0f} MB  ({ratio}{extra})",
                flush=True,
            )

    def ratio(kind: str, n: int) -> str:
        if n not in figures or 1000 not in figures or kind not in figures[n]:
            return "n/a"
        return f"{figures[n][kind]['wall_s'] / figures[1000][kind]['wall_s']:.2f}"

    def vs_floor(n: int, kind: str = "plan") -> str:
        if n not in figures:
            return "n/a"
        return f"{figures[n][kind]['wall_s'] / figures[n]['floor']['wall_s']:.2f}"

    rss_100k = (
        f"{max(r['rss_mb'] for r in figures[100000].values()):.0f}" if 100000 in figures else "n/a"
    )
    print(
        f"plan_ratio_10k={ratio('plan', 10000)} apply_ratio_10k={ratio('apply', 10000)} "
        f"status_ratio_10k={ratio('status', 10000)} plan_vs_floor_10k={vs_floor(10000)} "
        f"plan_vs_floor_100k={vs_floor(100000)} "
        f"incremental_vs_floor_10k={vs_floor(10000, 'incremental')} "
        f"incremental_vs_floor_100k={vs_floor(100000, 'incremental')} "
        f"plan_only_vs_floor_10k={vs_floor(10000, 'plan_only')} "
        f"plan_only_vs_floor_100k={vs_floor(100000, 'plan_only')} "
        f"event_vs_floor_10k={vs_floor(10000, 'event')} "
        f"event_vs_floor_100k={vs_floor(100000, 'event')} "
        f"event_fault_vs_floor_10k={vs_floor(10000, 'event_fault')} "
        f"event_fault_vs_floor_100k={vs_floor(100000, 'event_fault')} rss_mb_100k={rss_100k}"
    )


if __name__ == "__main__":
    main()
