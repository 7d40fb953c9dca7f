"""navarch's command line. Exit codes (Terraform's -detailed-exitcode, plus two of ours):

  0  success; for `plan --detailed-exitcode`: no changes (the fleet matches fleet.yaml)
  1  error (bad input or usage, a failed action, a stale saved plan)
  2  `plan --detailed-exitcode`: the fleet differs from fleet.yaml (actions to take, or
     held back by the budget, rate limit or capacity, or waiting: a drain, a replacement);
     `destroy`: nodes are still draining (run it again, or --force)
  3  a safety rule stopped something for a human (circuit breaker open, orphan guard,
     duplicate node names); the rest was applied
  4  another run holds the fleet lock (lease)
  5  this apply lost its lease mid-run (it lapsed past safety.lock_ttl without renewal, or
     another run took it over): it stopped acting and wrote no state; the run holding the
     lease converges the fleet
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from navarch import __version__
from navarch.errors import ConfigError, LeaseLost, LockHeld, NavarchError, StalePlan

if TYPE_CHECKING:
    from navarch.planner.model import Plan
    from navarch.spec import FleetSpec

# Heavier modules (jsonschema, the planner, cloud SDKs) are imported inside the commands
# that need them, so `navarch agent run --once` on a node's timer starts fast.


def load_fleet(path: str | Path) -> FleetSpec:
    """navarch.spec.load_fleet, imported on first use."""
    from navarch.spec import load_fleet as _load

    return _load(path)


def render_text(plan: Plan, *, verbose: bool = False) -> str:
    """navarch.reconcile.render.render_text, imported on first use."""
    from navarch.reconcile.render import render_text as _render

    return _render(plan, verbose=verbose)

EXIT_OK, EXIT_ERROR, EXIT_CHANGES, EXIT_HALTED, EXIT_LOCKED, EXIT_LEASE_LOST = 0, 1, 2, 3, 4, 5


def _err(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)


def _options(args: argparse.Namespace, **extra: Any) -> Any:
    """PlanOptions from --pool, --replace and --allow-destroy (where the command has them)."""
    from navarch.planner.plan import PlanOptions

    pools = getattr(args, "pool", None)
    return PlanOptions(
        pools=frozenset(pools) if pools else None,
        replace=frozenset(getattr(args, "replace", None) or ()),
        allow_destroy=bool(getattr(args, "allow_destroy", False)),
        **extra,
    )


def _halt_exit(plan: Plan) -> int | None:
    """EXIT_HALTED with the reasons on stderr when a safety rule stopped something."""
    if not plan.safety_stopped:
        return None
    from navarch.planner.model import HaltRule

    for h in plan.halts:
        if h.safety_stop:
            what = ("circuit breaker open" if h.rule is HaltRule.CIRCUIT_BREAKER
                    else h.rule.value.replace("_", " "))
            _err(f"{what} ({h.pool}): {h.message}")
    return EXIT_HALTED


def _open(path: str):
    from navarch.reconcile.run import Fleet

    spec = load_fleet(path)
    spec.ensure_local_secret()
    return Fleet.open(spec)


# -- validate ---------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    """`navarch validate FLEET`: exit 0 when valid; else every problem found (schema errors,
    the first cross-field error, missing or broken playbooks), one line each, and exit 1."""
    from navarch.spec import fleet_problems

    problems = fleet_problems(args.fleet)
    for problem in problems:
        _err(str(problem))
    if problems:
        print(f"{args.fleet}: {len(problems)} problem(s) found.", file=sys.stderr)
        return EXIT_ERROR
    spec = load_fleet(args.fleet)
    nodes = sum(p.target_nodes for p in spec.pools)
    print(f"{args.fleet}: valid. Fleet {spec.name}: {len(spec.pools)} pool(s), "
          f"{nodes} node(s) at target.")
    return EXIT_OK


# -- plan -------------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    """`navarch plan`: render the plan; exit 0/2 (--detailed-exitcode), 3 breaker open."""
    from navarch.reconcile.render import plan_to_json, render_markdown
    from navarch.reconcile.run import clock, gather

    fleet = _open(args.fleet)
    snap = gather(fleet, clock(), _options(args))
    _report_fleet_rejection(snap)
    plan = snap.plan
    doc = plan_to_json(plan)
    if args.out:
        saved = {**doc, "fleet_file": str(Path(args.fleet).resolve())}
        Path(args.out).write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
    elif args.markdown:
        print(render_markdown(plan), end="")
    else:
        print(render_text(plan, verbose=args.verbose), end="")
        if args.out:
            print(f"\nSaved the plan to {args.out}. Apply exactly it with: navarch apply {args.out}")
    halted = _halt_exit(plan)
    if halted is not None:
        return halted
    if args.detailed_exitcode and not plan.converged:
        return EXIT_CHANGES
    return EXIT_OK


# -- apply ------------------------------------------------------------------------------
def _load_plan_file(path: str) -> dict[str, Any] | None:
    """The saved plan's JSON if path is one, else None (it is then a fleet file)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", file=path) from exc
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "format_version" in doc else None


def _confirm(plan: Plan) -> bool:
    print(render_text(plan), end="")
    print("\nDo you want to perform these actions? Only 'yes' will be accepted.")
    try:
        answer = input("  Enter a value: ")
    except EOFError:
        answer = ""
    return answer.strip() == "yes"


def cmd_apply(args: argparse.Namespace) -> int:
    """`navarch apply FLEET|PLANFILE`: converge; exit 0, 1 failed action, 3 breaker open."""
    from navarch.reconcile.render import plan_from_json
    from navarch.reconcile.run import run_apply

    saved_doc = _load_plan_file(args.target)
    saved: Plan | None = None
    fleet_path = args.target
    if saved_doc is not None:
        saved = plan_from_json(saved_doc)
        fleet_path = saved_doc.get("fleet_file") or ""
        if not fleet_path:
            raise ConfigError("saved plan names no fleet file", file=args.target)
    fleet = _open(fleet_path)

    def show(outcome) -> None:
        a = outcome.action
        target = a.node or a.pool
        mark = "ok" if outcome.ok else "FAILED"
        print(f"{target}: {a.kind.value} {mark}: {outcome.detail}", flush=True)

    def show_plan(plan: Plan) -> bool:
        print(render_text(plan), end="")
        print()
        return True

    confirm = show_plan if (args.auto_approve or saved is not None) else _confirm
    from navarch.unattended import Unattended

    side = Unattended(fleet, args.run_id, metrics_textfile=args.metrics_textfile,
                      pools=frozenset(args.pool) if args.pool else None,
                      progress=args.log_format != "json")
    try:
        result = run_apply(fleet, command=f"apply {args.target}", saved=saved,
                           confirm=side.confirm(confirm), on_outcome=side.outcome(show),
                           options=_options(args), after_apply=side.after_apply,
                           run_id=args.run_id)
    except NavarchError as exc:
        side.finish(None, exc)
        side.summary(None, EXIT_ERROR)
        raise
    finally:
        side.close()
    if result is None:
        print("Apply cancelled.")
        return EXIT_ERROR
    side.finish(result, None)
    code = _apply_exit(result)
    side.summary(result, code)
    return code


def _apply_exit(result) -> int:
    """Print the apply's closing lines -> its exit code (0, 1 failed action, 3 halted)."""
    plan = result.plan
    if not plan.actions:
        print(render_text(plan), end="")
    failed = [o for o in result.outcomes if not o.ok]
    if plan.actions:
        print(f"\nApply complete: {len(result.outcomes) - len(failed)} succeeded, "
              f"{len(failed)} failed (run {result.run_id}).")
    for o in failed:
        _err(f"{o.action.kind.value} {o.action.node or o.action.pool} failed: {o.detail}")
    if result.audit_error:
        _err(result.audit_error)
    halted = _halt_exit(plan)
    if halted is not None:
        return halted
    return EXIT_ERROR if failed or result.audit_error else EXIT_OK


# -- destroy ----------------------------------------------------------------------------
def cmd_destroy(args: argparse.Namespace) -> int:
    """`navarch destroy FLEET [--pool P] [--force]`: every node leaves (cordon, drain,
    terminate); exit 0 when none is left, 2 while drains are still running."""
    from navarch.reconcile.run import clock, gather, run_apply

    fleet = _open(args.fleet)
    fleet.secret_optional = True  # a fleet whose secret is lost can still be destroyed
    options = _options(args, destroy=True, force=args.force)
    what = f"pool(s) {', '.join(args.pool)}" if args.pool else f"fleet {fleet.spec.name}"

    def confirm(plan: Plan) -> bool:
        print(render_text(plan), end="")
        if args.auto_approve:
            print()
            return True
        print(f"\nDestroy every node of {what}? Only 'yes' will be accepted.")
        try:
            return input("  Enter a value: ").strip() == "yes"
        except EOFError:
            return False

    failed = 0
    for _ in range(3):  # cordon + drain, then what finished draining at once, then re-check
        result = run_apply(fleet, command=f"destroy {args.fleet}", confirm=confirm,
                           options=options)
        if result is None:
            print("Destroy cancelled.")
            return EXIT_ERROR
        failed += sum(not o.ok for o in result.outcomes)
        if not result.plan.actions:
            break
    left = [v for v in gather(fleet, clock(), options).plan.views
            if options.includes(v.pool)]
    if failed:
        _err(f"{failed} action(s) failed; run `navarch destroy` again")
        return EXIT_ERROR
    if left:
        print(f"\n{len(left)} node(s) of {what} are still draining: run `navarch destroy` again "
              "once their drains finish (or drain_timeout passes), or pass --force.")
        return EXIT_CHANGES
    print(f"\nDestroy complete: no node of {what} is left; the audit log stays in the store.")
    return EXIT_OK


# -- status -----------------------------------------------------------------------------
def _status_doc(spec: FleetSpec, snap) -> dict[str, Any]:
    views = snap.observed.views
    by_pool: dict[str, list[Any]] = {}  # grouped once: a scan of every node per pool is
    for v in views:                      # pools x nodes (100 x 100,000 in bench/scale.py)
        by_pool.setdefault(v.pool, []).append(v)
    pools = []
    for p in spec.pools:
        pv = by_pool.get(p.name, [])
        pools.append({
            "pool": p.name, "provider": p.provider, "min": p.min_nodes, "target": p.target_nodes,
            "max": p.max_nodes, "providers": [pl.provider for pl in p.placed()],
            "nodes": [{
                "node": v.node, "instance_id": v.instance.instance_id if v.instance else None,
                "provider": v.instance.provider if v.instance else None,
                "zone": v.instance.zone if v.instance else None,
                "instance_type": v.instance.instance_type if v.instance else None,
                "lifecycle": v.lifecycle.value,
                "health": v.summary.status if v.summary else None,
                "report_fresh": bool(v.summary) and not v.rejected and v.lifecycle.value not in (
                    "stale", "offline"),
                "health_score": v.summary.health_score if v.summary else None,
                "report_age_s": round(v.report_age_s, 1) if v.report_age_s is not None else None,
                "clock_skew_s": (round(v.summary.clock_skew_s, 1) if v.summary is not None
                                 and v.summary.clock_skew_s is not None else None),
                "reason": v.reason, "rejected": v.rejected,
                "ladder": _ladder_doc(p, v, snap.memory.pool(p.name).lemons, snap.now),
            } for v in pv],
            "lemons": list(snap.memory.pool(p.name).lemons),
            "lemon_hosts": list(snap.memory.pool(p.name).lemon_hosts),
        })
    from navarch.reconcile.reports import fleet_rejection

    return {"fleet": spec.name, "store": spec.store_url, "state_serial": snap.loaded.serial,
            "error": fleet_rejection(views), "pools": pools,
            "rejections": dict(snap.memory.rejections),
            "foreign": [{"provider": i.provider, "instance_id": i.instance_id}
                        for i in snap.observed.foreign],
            "orphans": [{"node": v.node, "pool": v.pool, "provider": v.instance.provider,
                         "instance_id": v.instance.instance_id, "reason": v.reason}
                        for v in views if v.lifecycle.value == "orphan" and v.instance],
            "duplicates": [{"node": d.node, "instance_ids": [i.instance_id for i in d.instances]}
                           for d in snap.observed.duplicates]}


def _ladder_doc(pool: Any, v: Any, lemons: Sequence[str], now: datetime) -> dict[str, Any]:
    """A node's remediation-ladder state for `status` (issue 13): the last rung tried and
    for which fault, the faults within lemon_window, whether it is a lemon (lemon_after
    faults in the window, or its instance id was replaced as one), the last diagnostics."""
    from navarch.planner.model import diag_to_json, ts

    h = pool.health
    count = sum((now - t).total_seconds() <= h.lemon_window_s for _, t in v.faults)
    iid = v.instance.instance_id if v.instance else None
    host = v.instance.host_id if v.instance else None
    return {"rung": v.rung or None, "rung_fault": v.rung_fault or None, "rung_at": ts(v.rung_at),
            "faults_in_window": count, "lemon_after": h.lemon_after,
            "lemon": count >= h.lemon_after or (iid is not None and iid in lemons),
            "return_streak": v.return_streak, "host_id": host,
            "diag": diag_to_json(v.diag) if v.diag is not None else None}


def _print_ladder(doc: dict[str, Any]) -> None:
    """One line per node with ladder state (a rung tried, faults in the window, a lemon, a
    diagnostic), and each pool's remembered lemon instance ids."""
    lines = []
    for p in doc["pools"]:
        for n in p["nodes"]:
            lad = n["ladder"]
            parts = []
            if lad["rung"]:
                parts.append(f"rung {lad['rung']} for {lad['rung_fault']} at {lad['rung_at']}")
            if lad["faults_in_window"]:
                parts.append(f"{lad['faults_in_window']} of lemon_after {lad['lemon_after']} "
                             "faults in lemon_window")
            if lad["lemon"]:
                parts.append("LEMON")
            d = lad["diag"]
            if d:
                parts.append(f"diag -r {d['level']} ({d['why']}) {d['state']} at {d['at']}"
                             + (f": {d['detail']}" if d["detail"] else ""))
            if parts:
                lines.append(f"  {n['node']}: " + "; ".join(parts))
        if p["lemons"]:
            lines.append(f"  pool {p['pool']} lemons (uncordon needs --force): "
                         + ", ".join(p["lemons"]))
        if p["lemon_hosts"]:
            lines.append(f"  pool {p['pool']} lemon hosts: " + ", ".join(p["lemon_hosts"]))
    if lines:
        print("\nRemediation ladder:\n" + "\n".join(lines))


def _report_fleet_rejection(snap) -> str | None:
    """Print one error line when every node's report is rejected for one reason (issue 16
    item 3: a wrong secret must not look like a table of `unknown` nodes); return it."""
    from navarch.reconcile.reports import fleet_rejection

    message = fleet_rejection(snap.observed.views)
    if message:
        _err(message)
    return message


def cmd_status(args: argparse.Namespace) -> int:
    """`navarch status`: counts per pool and lifecycle, then the nodes that are not healthy
    (every node with --all), or --json (every node)."""
    from navarch.durations import format_duration_s
    from navarch.reconcile.run import clock, gather

    fleet = _open(args.fleet)
    snap = gather(fleet, clock())
    doc = _status_doc(fleet.spec, snap)
    _report_fleet_rejection(snap)
    if args.html:
        from navarch import status_page

        html = status_page.render_status_page(
            fleet.spec, snap.plan, snap.memory, snap.now,
            status_page.recent_events(fleet.store, fleet.spec.name))
        Path(args.html).write_text(html)
        print(f"Wrote the status page to {args.html}.")
        return EXIT_OK
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return EXIT_OK
    rows = [("POOL", "NODE", "INSTANCE", "ZONE", "TYPE", "LIFECYCLE", "HEALTH", "SCORE",
             "REPORT AGE", "REASON")]
    hidden = 0
    for p in doc["pools"]:
        for n in p["nodes"]:
            if not args.all and n["lifecycle"] == "healthy":
                hidden += 1
                continue
            age = format_duration_s(n["report_age_s"]) if n["report_age_s"] is not None else "-"
            health, score = n["health"] or "-", n["health_score"]
            score_text = "-" if score is None else str(score)
            if n["health"] and not n["report_fresh"]:
                # The last accepted report no longer speaks for the node: say so, keep it
                # visible in parentheses (issue 16 item 13: never "offline ... healthy 100").
                health, score_text = f"{n['lifecycle']} (was {n['health']})", f"({score})"
            rows.append((p["pool"], n["node"], n["instance_id"] or "-", n["zone"] or "-",
                         n["instance_type"] or "-", n["lifecycle"], health, score_text, age,
                         n["reason"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print(f"Fleet {doc['fleet']} (state serial {doc['state_serial']}, store {doc['store']})")
    for p in doc["pools"]:
        counts = Counter(n["lifecycle"] for n in p["nodes"])
        by_state = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"  pool {p['pool']}: {len(p['nodes'])} node(s) ({by_state or 'none'}); "
              f"min {p['min']}, target {p['target']}, max {p['max']}")
    print()
    if len(rows) > 1:
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    if hidden:
        print(f"{'' if len(rows) == 1 else chr(10)}{hidden} healthy node(s) not listed "
              "(navarch status --all lists every node)")
    _print_ladder(doc)
    if doc["rejections"]:
        print("\nRejected reports (all time): " +
              ", ".join(f"{k}={v}" for k, v in sorted(doc["rejections"].items())))
    if doc["orphans"]:
        print("\nOrphans (this fleet's tags, pool no longer declared; apply terminates them): " +
              ", ".join(f"{o['node']} ({o['pool']}, {o['instance_id']})" for o in doc["orphans"]))
    if doc["duplicates"]:
        print("\nDuplicate node names (one name, several instances): " +
              "; ".join(f"{d['node']}: {', '.join(d['instance_ids'])}" for d in doc["duplicates"]))
    if doc["foreign"]:
        print("\nForeign instances (no navarch tags for this fleet; left alone): " +
              ", ".join(f["instance_id"] for f in doc["foreign"]))
    return EXIT_OK


# -- force-unlock, uncordon -----------------------------------------------------------------
def cmd_force_unlock(args: argparse.Namespace) -> int:
    """`navarch force-unlock FLEET LOCK_ID`: remove a stuck lock by its id."""
    from navarch.reconcile.state import force_unlock
    from navarch.stores import open_store

    spec = load_fleet(args.fleet)
    held = force_unlock(open_store(spec.store_url, base_dir=spec.base_dir), spec.name, args.lock_id)
    who = f" held by {held.holder} for {held.command!r}" if held else ""
    print(f"Removed lock {args.lock_id}{who}.")
    return EXIT_OK


def cmd_uncordon(args: argparse.Namespace) -> int:
    """`navarch uncordon FLEET NODE` (see navarch.reconcile.uncordon)."""
    from navarch.reconcile.uncordon import uncordon

    fleet = _open(args.fleet)
    detail = uncordon(fleet, args.node, force=getattr(args, "force", False))
    print(f"{args.node}: uncordoned ({detail}).")
    return EXIT_OK


def cmd_reboot(args: argparse.Namespace) -> int:
    """`navarch reboot FLEET NODE` (see navarch.reconcile.manual.reboot)."""
    from navarch.reconcile.manual import reboot

    detail = reboot(_open(args.fleet), args.node, force=args.force)
    print(f"{args.node}: {detail}.")
    return EXIT_OK


def cmd_cordon(args: argparse.Namespace) -> int:
    """`navarch cordon FLEET NODE --reason TEXT` (see navarch.reconcile.manual.cordon)."""
    from navarch.reconcile.manual import cordon

    detail = cordon(_open(args.fleet), args.node, args.reason)
    print(f"{args.node}: cordoned by an operator ({detail}); navarch will not undo it, "
          "`navarch uncordon` will.")
    return EXIT_OK


# -- local provider -------------------------------------------------------------------------
def cmd_local_tick(args: argparse.Namespace) -> int:
    """`navarch local tick`: every local node's agent reports once."""
    from navarch.providers import local_ops
    from navarch.reconcile.run import clock

    spec = load_fleet(args.fleet)
    spec.ensure_local_secret()
    # The agents' own JSON logs are for journald on real machines; here each node's
    # outcome is the line printed below.
    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    results = local_ops.tick(spec, now=clock())
    for r in results:
        print(f"{r.node}: {r.status}")
    if not results:
        print("No local nodes yet: run `navarch apply` first.")
    return EXIT_OK


def cmd_local_inject(args: argparse.Namespace) -> int:
    """`navarch local inject`: faults into one local node (see navarch.providers.local_ops.inject)."""
    from navarch.providers import local_ops

    faults = (args.xid, args.gpu_lost or None, args.temperature, args.ecc, args.utilization,
              args.processes, args.silent or None, args.resume or None, args.preempt or None,
              args.clear or None)
    if all(f is None for f in faults):
        args.inject_parser.error("no fault given: pass at least one of --xid, --gpu-lost, "
                                 "--temperature, --ecc, --utilization, --processes, --silent, "
                                 "--resume, --preempt, --clear")
    spec = load_fleet(args.fleet)
    silent = True if args.silent else (False if args.resume else None)
    done = local_ops.inject(
        spec, args.node, xid=args.xid, gpu=args.gpu, gpu_lost=args.gpu_lost,
        temperature_c=args.temperature, ecc_uncorrected=args.ecc, utilization_pct=args.utilization,
        processes=args.processes, silent=silent, preempt=args.preempt, clear=args.clear,
    )
    for line in done or ["nothing to inject (see --help)"]:
        print(f"{args.node}: {line}")
    return EXIT_OK


def cmd_local_reboot(args: argparse.Namespace) -> int:
    """`navarch local reboot`: new boot id for a local node."""
    from navarch.providers import local_ops

    local_ops.reboot(load_fleet(args.fleet), args.node)
    print(f"{args.node}: rebooted (new boot id; kernel log and faults cleared)")
    return EXIT_OK


def cmd_local_foreign(args: argparse.Namespace) -> int:
    """`navarch local launch-foreign`: a machine without navarch's tags."""
    from navarch.providers import local_ops

    iid = local_ops.launch_foreign(load_fleet(args.fleet), args.zone, args.instance_type)
    print(f"launched foreign machine {iid} (no navarch tags)")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse that exits 1 on a usage error: 2 means "changes present" to scripts
    running `plan --detailed-exitcode` (Terraform's contract)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _targeting(s: argparse.ArgumentParser) -> None:
    s.add_argument("--pool", action="append", metavar="POOL",
                   help="only this pool and its orphans (repeatable; Terraform -target)")
    s.add_argument("--replace", action="append", metavar="NODE",
                   help="replace this node through surge, cordon and drain (Terraform "
                        "-replace), whatever its lifecycle and past an open circuit breaker; "
                        "exit 1 for a node the fleet does not have")
    s.add_argument("--allow-destroy", action="store_true",
                   help="let this run terminate more orphans than safety.max_orphan_terminations")


def _log_format(s: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    s.add_argument("--log-format", choices=("text", "json"), default=default,
                   help="json: every log line a JSON object with the run id (for batch jobs)")


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a scenario (or two with --compare) on the real planner; exit 1 when an
    `assert:` line fails (docs/simulate.md)."""
    from navarch.simulate.engine import check_asserts, simulate
    from navarch.simulate.report import summary_rows, to_html, to_json
    from navarch.simulate.scenario import load_scenario

    paths = [args.scenario] + ([args.compare] if args.compare else [])
    docs, texts, failed = [], [], False
    seed = args.seed
    for path in paths:
        scenario = load_scenario(path)
        seed = scenario.seed if seed is None else seed  # --compare: both on the same seed
        doc = simulate(scenario, seed=seed)
        try:
            doc["asserts"] = check_asserts(doc, scenario.asserts)
        except ValueError as exc:
            raise ConfigError(str(exc), file=str(path), key_path="assert",
                              hint="e.g. availability >= 0.999") from exc
        docs.append(doc)
        texts.append(Path(path).read_text())
        print(f"scenario {doc['scenario']} (seed {doc['seed']})")
        for key, value in summary_rows(doc):
            print(f"  {key:28} {value}")
        for a in doc["asserts"]:
            failed = failed or not a["ok"]
            print(f"  {'PASS' if a['ok'] else 'FAIL'} {a['assert']} (value {a['value']})")
    if args.json:
        out = docs[0] if len(docs) == 1 else {"runs": docs}
        Path(args.json).write_text(to_json(out))
    if args.html:
        Path(args.html).write_text(to_html(docs, texts))
    return 1 if failed else 0


def _reconcile_commands(sub: Any) -> None:
    """validate, plan, apply, destroy."""
    s = sub.add_parser("validate", help="check fleet.yaml; exit 1 on any error")
    s.add_argument("fleet")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("plan", help="show what apply would change")
    s.add_argument("fleet")
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable (schemas/plan.schema.json)")
    fmt.add_argument("--markdown", action="store_true", help="for a pull-request comment")
    s.add_argument("--out", metavar="FILE", help="save the plan for `navarch apply FILE`")
    s.add_argument("--verbose", action="store_true",
                   help="list every action (large groups are otherwise summarised)")
    s.add_argument("--detailed-exitcode", action="store_true",
                   help="exit 0 no changes, 1 error, 2 the fleet differs from fleet.yaml")
    _targeting(s)
    _log_format(s)
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("apply", help="converge the fleet (or apply a saved plan)")
    s.add_argument("target", metavar="FLEET_OR_PLANFILE")
    s.add_argument("--auto-approve", action="store_true", help="do not ask for 'yes'")
    s.add_argument("--metrics-textfile", metavar="PATH",
                   help="write Prometheus metrics for node_exporter's textfile collector")
    _targeting(s)
    _log_format(s)
    s.set_defaults(func=cmd_apply)

    s = sub.add_parser("destroy", help="cordon, drain and terminate every node (or a pool's)")
    s.add_argument("fleet")
    s.add_argument("--pool", action="append", metavar="POOL", help="only this pool (repeatable)")
    s.add_argument("--auto-approve", action="store_true", help="do not ask for 'yes'")
    s.add_argument("--force", action="store_true",
                   help="terminate at once, without waiting for drains")
    s.set_defaults(func=cmd_destroy)


def _node_commands(sub: Any) -> None:
    """status, force-unlock and the per-node verbs (uncordon, reboot, cordon), simulate."""
    s = sub.add_parser("status", help="pools and nodes with lifecycle, health, report age")
    s.add_argument("fleet")
    s.add_argument("--json", action="store_true")
    s.add_argument("--html", metavar="FILE",
                   help="write a static HTML status page (no JavaScript) to FILE")
    _log_format(s)
    s.add_argument("--all", action="store_true", help="list healthy nodes too")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("force-unlock", help="remove a stuck lock (give the id it reports)")
    s.add_argument("fleet")
    s.add_argument("lock_id")
    s.set_defaults(func=cmd_force_unlock)

    s = sub.add_parser("uncordon", help="return a node navarch cordoned to service")
    s.add_argument("fleet")
    s.add_argument("node")
    s.add_argument("--force", action="store_true",
                   help="return it anyway: a lemon's instance, a report not fresh and "
                        "healthy, a cordon made outside navarch (the output says which)")
    s.set_defaults(func=cmd_uncordon)

    s = sub.add_parser("reboot", help="reboot a node through its provider's API")
    s.add_argument("fleet")
    s.add_argument("node")
    s.add_argument("--force", action="store_true",
                   help="reboot even though its latest report shows GPU processes")
    s.set_defaults(func=cmd_reboot)

    s = sub.add_parser("cordon", help="an operator's cordon: navarch never undoes it itself")
    s.add_argument("fleet")
    s.add_argument("node")
    s.add_argument("--reason", required=True, help="why (shown by the scheduler, audit log)")
    s.set_defaults(func=cmd_cordon)

    s = sub.add_parser("simulate", help="simulate a scenario on the real planner, virtual clock")
    s.add_argument("scenario")
    s.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    s.add_argument("--json", default=None, help="write the result document here")
    s.add_argument("--html", default=None, help="write a self-contained HTML report here")
    s.add_argument("--compare", default=None, help="a second scenario, run on the same seed")
    s.set_defaults(func=cmd_simulate)


def _local_commands(sub: Any) -> None:
    """`navarch local ...`: drive the embedded local provider's machines."""
    local = sub.add_parser("local", help="drive the embedded local provider's machines")
    lsub = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    s = lsub.add_parser("tick", help="fire every local node's agent once, as its timer would")
    s.add_argument("fleet")
    s.set_defaults(func=cmd_local_tick)
    s = lsub.add_parser("inject", help="inject a fault into a local node")
    s.add_argument("fleet")
    s.add_argument("node")
    s.add_argument("--xid", type=int, help="append an NVRM Xid line with this code")
    s.add_argument("--gpu", type=int, default=0, help="GPU index the fault hits (default 0)")
    s.add_argument("--gpu-lost", action="store_true", help="the GPU fell off the bus")
    s.add_argument("--temperature", type=float, metavar="C", help="GPU temperature, Celsius")
    s.add_argument("--ecc", type=int, metavar="N", help="volatile uncorrectable ECC errors")
    s.add_argument("--utilization", type=float, metavar="PCT", help="utilisation of every GPU")
    s.add_argument("--processes", type=int, metavar="N", help="GPU processes on the GPU")
    s.add_argument("--silent", action="store_true", help="the agent stops reporting")
    s.add_argument("--resume", action="store_true", help="the agent reports again")
    s.add_argument("--preempt", action="store_true", help="a spot preemption notice")
    s.add_argument("--clear", action="store_true", help="remove every injected fault first")
    s.set_defaults(func=cmd_local_inject, inject_parser=s)
    s = lsub.add_parser("reboot", help="reboot a local node (new boot id, faults cleared)")
    s.add_argument("fleet")
    s.add_argument("node")
    s.set_defaults(func=cmd_local_reboot)
    s = lsub.add_parser("launch-foreign", help="start a machine without navarch tags")
    s.add_argument("fleet")
    s.add_argument("--zone", default="sim-1a")
    s.add_argument("--instance-type", default="sim-h100x8")
    s.set_defaults(func=cmd_local_foreign)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for every command (the agent's are registered by navarch.agent.cli)."""
    p = _Parser(prog="navarch", description="Keep a GPU fleet healthy: plan/apply "
                                "against fleet.yaml, and the node health agent.")
    p.add_argument("--version", action="version", version=f"navarch {__version__}")
    _log_format(p, default="text")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _reconcile_commands(sub)
    _node_commands(sub)
    _local_commands(sub)

    try:
        from navarch.agent.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one navarch command; returns the process exit code (see module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from navarch import logs

    args.run_id = logs.new_run_id(datetime.now(UTC))
    if args.command != "agent":  # the agent configures its own JSON logs for journald
        logs.configure(args.log_format, args.run_id)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`navarch status ... | head`): no traceback; point stdout
        # at /dev/null so the interpreter's final flush does not raise again (Python docs,
        # "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except LockHeld as exc:
        _err(f"{exc}. Another navarch run is converging this fleet; try again later, or if "
             f"that run is dead: navarch force-unlock FLEET {exc.lock_id}")
        return EXIT_LOCKED
    except LeaseLost as exc:
        _err(f"{exc}. This run stopped acting and wrote no state.")
        return EXIT_LEASE_LOST
    except StalePlan as exc:
        _err(str(exc))
        return EXIT_ERROR
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_ERROR
    except NavarchError as exc:
        _err(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_ERROR


__all__ = ["main", "build_parser"]
