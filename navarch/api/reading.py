"""navarch.api's reading verbs: validate, plan, status, history, report, and what the CLI's other
reading commands need (the status page, a saved plan, a node's instance, cloud-init).
Each reads only; none creates the local secret file (navarch.api.door)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.api.door import loaded, now_utc, open_fleet, snapshot
from navarch.api.results import (
    CloudInit,
    HistoryResult,
    LoadedFleet,
    PlanResult,
    Problem,
    ReportResult,
    SavedPlan,
    StatusPage,
    StatusResult,
    Validation,
)
from navarch.errors import ConfigError, NavarchError

if TYPE_CHECKING:
    from navarch.fleet.confine import Confinement
    from navarch.inventory import Instance
    from navarch.planner.context import PlanOptions
    from navarch.planner.model import Lifecycle, Plan
    from navarch.reconcile.fault_report import NodeNow

#: How far back `history` reads when no `since` is given (the CLI's `--since` default).
DEFAULT_HISTORY_WINDOW_S = 24 * 3600


def validate(path: str | Path) -> Validation:
    """Every problem `navarch validate` finds in fleet.yaml at `path`: schema errors in
    file order, the first cross-field error, missing or broken playbooks.

    Never raises for a bad file: an unreadable file or bad YAML is its one problem.
    """
    return _validate(path, None)


def _validate(path: str | Path, confine: Confinement | None) -> Validation:
    from navarch.fleet.load import fleet_problems
    from navarch.fleet.load import load_fleet as _load

    found = fleet_problems(path, confine=confine)
    if found:
        errors = tuple(
            Problem(e.message, file=e.file, line=e.line, key_path=e.key_path, hint=e.hint)
            for e in found
        )
        return Validation(str(path), None, tuple(str(p) for p in found), 0, 0, errors)
    spec = _load(path)
    return Validation(
        str(path), spec.name, (), len(spec.pools), sum(p.target_nodes for p in spec.pools)
    )


def validate_text(
    text: str, *, beside: str | Path, forbidden: Iterable[Path | None] = ()
) -> Validation:
    """validate() of a candidate fleet.yaml given as text, read as if it were the file
    `beside` (so its relative paths, playbooks and file:// store resolve as they would).

    The candidate is confined (navarch.fleet.confine): a file it names that validate would open
    (a pool's playbooks) is opened only when it lies inside `beside`'s directory by a
    relative path and is neither the candidate's secret file nor one of `forbidden` (the
    served fleet's secret file); any other is a problem of its own, never opened. Its
    secret.file and file:// store are never opened, and no problem quotes the content of
    a file. The text is written to a temporary file in `beside`'s directory and removed
    at once; nothing else is written. Problems name the candidate as `beside`.
    """
    from navarch.fleet.confine import Confinement

    target = Path(beside)
    confine = Confinement.beside(target, forbidden)
    fd, tmp = tempfile.mkstemp(
        prefix=".navarch-candidate-",
        suffix=".yaml",
        dir=target.parent if str(target.parent) else ".",
    )
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        result = _validate(tmp, confine)
    finally:
        os.unlink(tmp)
    problems = tuple(p.replace(tmp, str(target)) for p in result.problems)
    errors = tuple(replace(e, file=str(target)) if e.file == tmp else e for e in result.errors)
    return Validation(
        str(target), result.fleet, problems, result.pools, result.nodes_at_target, errors
    )


def plan(
    fleet: LoadedFleet | str | Path,
    *,
    now: datetime | None = None,
    options: PlanOptions | None = None,
) -> PlanResult:
    """What `navarch apply` would do at `now` and why: actions with reasons, the halts of
    the safety rules, nodes and their lifecycles. Reads only; changes nothing (not even a
    missing local secret file: navarch.api.door).

    options: a PlanOptions (pools, --replace, --allow-destroy); None plans the whole fleet.
    When the plan provisions, its launches' prerequisites are checked by reads
    (PlanResult.preflight: every gap with its fix; navarch.reconcile.preflight).
    Raises ConfigError (bad fleet.yaml, missing fleet secret), StoreError, ProviderError.
    """
    from navarch.reconcile.preflight import preflight
    from navarch.reconcile.reports import fleet_rejection

    opened, snap = snapshot(loaded(fleet), now_utc(now), options)
    return PlanResult(snap.plan, fleet_rejection(snap.observed.views), preflight(opened, snap.plan))


def status(fleet: LoadedFleet | str | Path, *, now: datetime | None = None) -> StatusResult:
    """The fleet's status at `now`: every pool and node with lifecycle, health, report age
    (seconds) and ladder state (schemas/status.schema.json). Reads only.

    Raises ConfigError, StoreError, ProviderError.
    """
    from navarch.reconcile.status import fleet_status

    fl = loaded(fleet)
    _, snap = snapshot(fl, now_utc(now))
    return StatusResult(fleet_status(fl.spec, snap))


def status_page(fleet: LoadedFleet | str | Path, *, now: datetime | None = None) -> StatusPage:
    """The fleet's static HTML status page at `now` (navarch.notify.status_page: no JavaScript)
    with its recent audit events. Reads only. Raises ConfigError, StoreError,
    ProviderError."""
    from navarch.notify import status_page as page
    from navarch.reconcile.reports import fleet_rejection

    opened, snap = snapshot(loaded(fleet), now_utc(now))
    events = page.recent_events(opened.store, opened.spec.name)
    html = page.render_status_page(opened.spec, snap.plan, snap.memory, snap.now, events)
    return StatusPage(html, fleet_rejection(snap.observed.views))


def history(
    fleet: LoadedFleet | str | Path,
    node: str | None = None,
    since: datetime | timedelta | str | None = None,
    *,
    now: datetime | None = None,
) -> HistoryResult:
    """What happened to `node` (or the whole fleet) from `since` until `now`, and why, from
    the audit log; oldest first, then each node's state now.

    since: an aware datetime, a timedelta back from now, or text as `navarch history
    --since` takes it (a duration such as "1h" or "7d", or an RFC 3339 time); None means
    the last 24 hours. Raises ConfigError for a `since` that is none of these (or reaches
    back before the year 1), StoreError when the store cannot be read.
    """
    from navarch.fleet.durations import window_start
    from navarch.history import read_history
    from navarch.reconcile.state import load_memory
    from navarch.stores import open_store

    fl = loaded(fleet)
    spec = fl.spec
    until = now_utc(now)
    if since is None:
        since = timedelta(seconds=DEFAULT_HISTORY_WINDOW_S)
    start = window_start(since, until)
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    memory, _ = load_memory(store, spec.name)
    observed, unobserved = _observed(fl, until)
    return HistoryResult(
        read_history(
            store,
            spec.name,
            memory,
            since=start,
            until=until,
            node=node,
            observed=observed,
            unobserved=unobserved,
        )
    )


def known_names(fleet: str | Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(node names, pool names), sorted: the nodes of the fleet's last state (state/<fleet>
    .json in its store, as the last run wrote it) and the pools fleet.yaml declares or that
    state holds; what a shell completes. Raises ConfigError (fleet.yaml), StoreError."""
    from navarch.fleet.load import load_fleet as _load
    from navarch.reconcile.state import load_memory
    from navarch.stores import open_store

    spec = _load(fleet)
    memory, _ = load_memory(open_store(spec.store_url, base_dir=spec.base_dir), spec.name)
    nodes = sorted(nm.node for nm in memory.nodes)
    pools = sorted({p.name for p in spec.pools} | {nm.pool for nm in memory.nodes})
    return tuple(nodes), tuple(pools)


def report(
    fleet: LoadedFleet | str | Path,
    since: datetime | timedelta | str | None = None,
    *,
    now: datetime | None = None,
) -> ReportResult:
    """Per fault class over [since, now]: what navarch saw, what the pools' modes held back
    (would-be actions, when first and last planned) and what actually happened to each
    node: the actions that ran (audit log) and the node now (the cloud's listing and its
    reports, as `navarch status` shows it). since: as for `history` (None: the last 7
    days). Raises ConfigError for a bad `since`, StoreError when the store cannot be read;
    a fleet that cannot be observed is reported from its audit log alone, saying why.
    """
    from navarch.fleet.durations import window_start
    from navarch.reconcile.fault_report import read_report
    from navarch.stores import open_store

    fl = loaded(fleet)
    spec = fl.spec
    until = now_utc(now)
    start = window_start(since if since is not None else timedelta(days=7), until)
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    nodes, unobserved = _nodes_now(fl, until)
    return ReportResult(
        read_report(
            store,
            spec.name,
            since=start,
            until=until,
            now=nodes,
            modes=tuple((p.name, p.mode.value) for p in spec.pools),
            unobserved=unobserved,
        )
    )


def _nodes_now(fl: LoadedFleet, now: datetime) -> tuple[dict[str, NodeNow] | None, str]:
    """Each node as the cloud lists it and its reports show it at `now` (the snapshot
    `navarch status` reads), or (None, why) when the fleet cannot be observed."""
    from navarch.reconcile.fault_report import NodeNow
    from navarch.report.health import Status

    try:
        _, snap = snapshot(fl, now)
    except NavarchError as exc:
        return None, f"the fleet could not be observed: {exc}"
    out = {}
    for v in snap.observed.views:
        s, inst = v.summary, v.instance
        sick = s is not None and s.status is not Status.HEALTHY and s.fault_key is not None
        out[v.node] = NodeNow(
            v.node,
            v.pool,
            inst.instance_id if inst else None,
            inst.state.value if inst else None,
            v.lifecycle.value,
            v.reason,
            s.fault_key.format() if sick and s is not None and s.fault_key else "",
        )
    return out, ""


def _observed(
    fl: LoadedFleet, now: datetime
) -> tuple[dict[str, tuple[Lifecycle, str]] | None, str]:
    """Each node's lifecycle and reason as `navarch status` shows them (the same snapshot
    and fleet_status), so history and status never disagree about a node; (None, why)
    when the fleet cannot be observed (a provider or the reports unreachable): the audit
    log still tells its story, from navarch's state alone."""
    from navarch.reconcile.status import fleet_status

    try:
        _, snap = snapshot(fl, now)
    except NavarchError as exc:
        return None, f"the fleet could not be observed: {exc}"
    seen = fleet_status(fl.spec, snap)
    return {n.node: (n.lifecycle, n.reason) for p in seen.pools for n in p.nodes}, ""


def node_instance(fleet: LoadedFleet | str | Path, node: str) -> Instance:
    """The one instance of the fleet named `node` that has an address (for `navarch ssh`).

    Raises NavarchError: no such node, several instances under one name, no address yet
    (navarch.remote.session.node_instance); ProviderError when a provider cannot list.
    """
    from navarch.reconcile.run import list_inventory
    from navarch.remote.session import node_instance as one

    opened = open_fleet(fleet, acting=False)
    return one(list_inventory(opened), opened.spec.name, node)


def read_saved_plan(path: str | Path) -> SavedPlan | None:
    """The plan saved at `path` by `navarch plan --out`, or None when `path` is no saved
    plan (then it is a fleet file: its loader says where it is not).

    Raises ConfigError naming the file and key path when it is a saved plan that is not
    valid against schemas/plan.schema.json, names a node outside its own pool
    (<fleet>-<pool>-<nnnn>), or names no fleet file; or when `path` cannot be read.
    """
    from navarch.reconcile.render import plan_from_json

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", file=str(path)) from exc
    except UnicodeDecodeError:
        return None  # no saved plan (JSON is UTF-8)
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(doc, dict) and "format_version" in doc):
        return None
    _check_saved_plan(doc, str(path))
    fleet_file = doc.get("fleet_file") or ""
    if not fleet_file:
        raise ConfigError("saved plan names no fleet file", file=str(path))
    return SavedPlan(PlanResult(plan_from_json(doc)), fleet_file)


def _check_saved_plan(doc: dict[str, Any], path: str) -> None:
    """A saved plan is valid against schemas/plan.schema.json and every action names a node
    of its own pool; else ConfigError naming the file and key path, before the lease is
    taken or anything launched."""
    import jsonschema

    from navarch.fleet.schemas import validator_for

    errors = list(validator_for("plan.schema.json").iter_errors(doc))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        where = ".".join(str(p) for p in best.absolute_path) or None
        raise ConfigError(
            f"not a valid saved plan: {best.message[:200]}",
            file=path,
            key_path=where,
            hint="make it again with `navarch plan --out`",
        )
    for i, a in enumerate(doc["actions"]):
        node = a["node"]
        if node and not re.fullmatch(
            rf"{re.escape(doc['fleet'])}-{re.escape(a['pool'])}-\d{{4,}}", node
        ):
            raise ConfigError(
                f"action {a['action']} names node {node!r}, not a node of pool "
                f"{a['pool']!r} of fleet {doc['fleet']!r}",
                file=path,
                key_path=f"actions.{i}.node",
                hint="make the plan again with `navarch plan --out`",
            )


def stale_reason(
    fleet: LoadedFleet,
    shown: Plan,
    nodes: Iterable[str],
    *,
    now: datetime | None = None,
    options: PlanOptions | None = None,
) -> str | None:
    """Why `shown` is stale for `nodes` now (the saved-plan check of `navarch apply
    PLANFILE`: state serial, instances, the nodes' observations, the halts), or None
    while it still holds. Reads only. Raises ConfigError, StoreError, ProviderError."""
    from navarch.errors import StalePlan
    from navarch.reconcile.run import check_saved_plan

    _, snap = snapshot(fleet, now_utc(now), options)
    try:
        check_saved_plan(shown, snap, frozenset(nodes))
    except StalePlan as exc:
        return str(exc)
    return None


def cloud_init(
    fleet: LoadedFleet | str | Path,
    pool: str,
    node: str | None = None,
    *,
    reveal_key: bool = False,
    bundle_url: str | None = None,
) -> CloudInit:
    """The cloud-init user-data a node of `pool` boots with (navarch.agent.bootstrap). node:
    default <fleet>-<pool>-0001, the pool's first node as apply names it (its key and
    report path are a real first node's). Its signing key is a placeholder
    (bootstrap.KEY_PLACEHOLDER) unless reveal_key (the key signs that node's reports).
    bundle_url: where nodes fetch `navarch agent bundle`'s file; default: publish it to
    the fleet's store and use a pre-signed URL, as apply does.

    Raises KeyError for a pool fleet.yaml does not declare; ConfigError (a missing fleet
    secret with reveal_key), StoreError.
    """
    from navarch.agent.bootstrap import BundleSource, render_cloud_init
    from navarch.agent.bundle import build_bundle
    from navarch.fleet.secret import read_fleet_secret
    from navarch.planner.capacity import node_name
    from navarch.reconcile.publish import AgentDelivery
    from navarch.report.signing import derive_node_key
    from navarch.stores import open_store

    spec = loaded(fleet).spec
    spec.pool(pool)
    name = node or node_name(spec.name, pool, 1)
    key = derive_node_key(read_fleet_secret(spec), spec.name, name) if reveal_key else None
    if bundle_url:  # the operator hosts `navarch agent bundle`'s file there
        source = BundleSource(bundle_url, build_bundle().sha256)

        def bundle() -> BundleSource:
            return source

        text = render_cloud_init(spec, pool, name, key, bundle=bundle)
    else:
        store = open_store(spec.store_url, base_dir=spec.base_dir)
        text = render_cloud_init(spec, pool, name, key, bundle=AgentDelivery(store).get)
    return CloudInit(name, text, key is not None)
