"""fleet.yaml -> FleetSpec: the loader of the desired state (navarch.fleet.spec holds the model).

schemas/fleet.schema.json is the single source of truth for the file's shape and defaults
(navarch.fleet.schemas loads it and words its errors); navarch.fleet.text reads the YAML with
the line of every key, and this module adds what a schema cannot say (min <= target <=
max, a pool naming a provider that exists, autoscaling thresholds in order, offline_after
>= stale_after), orders a pool's places (cheapest, or a navarch.placement plugin), and turns every problem
into a ConfigError that names the file, the line, the key path and what to do. The fleet
secret the spec points to is read by the run that needs it (navarch.fleet.secret), never
kept on the desired state.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema

from navarch import plugins
from navarch.errors import ConfigError, PluginError
from navarch.fleet.acceptance import acceptance_policy
from navarch.fleet.confine import Confinement
from navarch.fleet.durations import parse_duration_s
from navarch.fleet.groups import check_placement_groups
from navarch.fleet.modes import Mode
from navarch.fleet.policy import REPORT_COST_MAX, Rule, compile_rule
from navarch.fleet.remedies import parse_rows
from navarch.fleet.schemas import (
    apply_defaults,
    dotted,
    line_for,
    load_schema,
    schema_error,
    validator_for,
)
from navarch.fleet.secret import secret_path, secret_problems
from navarch.fleet.spec import (
    Autoscaling,
    Diagnostics,
    FleetSpec,
    HealthPolicy,
    MetricsSpec,
    NetworkPolicy,
    Placement,
    PlaceSpec,
    PoolSpec,
    Replacement,
    SafetySpec,
    Scheduler,
    SinkSpec,
    SurgeOn,
    TopologyMatch,
    UpdateStrategy,
    ZonePolicy,
)
from navarch.fleet.text import compose_with_lines, read_fleet_text
from navarch.remote.playbook import PlaybookKind, load_playbook_file
from navarch.report.health import Remedy

__all__ = [
    "BUILTIN_SINKS",
    "MIN_LOCK_TTL_S",
    "fleet_problems",
    "load_fleet",
]


def fleet_problems(path: str | Path, *, confine: Confinement | None = None) -> list[ConfigError]:
    """Every problem `navarch validate` finds in fleet.yaml, not only the first.

    Returns [] for a valid fleet, else ConfigErrors (file, line, key path, hint): every
    schema error in file order; when the schema holds, the first cross-field error
    load_fleet raises; then, for a fleet that loads, every pool playbook
    (pools.<pool>.playbooks.<kind>) whose file is missing or does not load, naming the
    fleet file's line and the playbook's own error. Never raises: an unreadable file or
    bad YAML is returned as its one ConfigError.

    confine: for a candidate written by someone who may not read the fleet's directory
    (navarch.mcp.server's validate_fleet): a path outside confine.root, or naming the fleet
    secret, is a problem of its own and is never opened (navarch.fleet.confine).
    """
    source = Path(path)
    try:
        text = read_fleet_text(source)
        data, lines = compose_with_lines(text, str(source))
    except ConfigError as exc:
        return [exc]
    if not isinstance(data, dict):
        return [
            ConfigError(
                "the fleet file must be a YAML mapping",
                file=str(source),
                line=1,
                hint="start from fleet.example.yaml",
            )
        ]
    errors = [
        schema_error(e, source, lines) for e in validator_for("fleet.schema.json").iter_errors(data)
    ]
    if errors:
        return sorted(errors, key=lambda e: (e.line or 0, e.key_path or ""))
    try:
        spec = load_fleet(source)
    except ConfigError as exc:
        return [exc]
    if confine is None:
        problems = secret_problems(spec, line_for(lines, ("secret", "file")))
    else:
        # A candidate's secret.file is never opened: even its emptiness would leak.
        problems = []
        confine = confine.with_forbidden(secret_path(spec))
    return problems + _playbook_problems(spec, source, lines, confine)


def _playbook_problems(
    spec: FleetSpec,
    source: Path,
    lines: Mapping[tuple[Any, ...], int],
    confine: Confinement | None,
) -> list[ConfigError]:
    """Every pool playbook (pools.<pool>.playbooks.<kind>) that a candidate may not open,
    whose file is missing, or that does not load, as a ConfigError naming the fleet file's
    line (and the playbook's own error)."""
    problems: list[ConfigError] = []
    for pool in spec.pools:
        for kind, rel in sorted(pool.playbooks.items()):
            key = ("pools", pool.name, "playbooks", kind)
            line, key_path = line_for(lines, key), dotted(key)
            refused = confine.refusal(rel) if confine is not None else None
            if refused is not None:
                problems.append(
                    ConfigError(
                        f"playbook not opened: {refused}",
                        file=str(source),
                        line=line,
                        key_path=key_path,
                        hint="a candidate may name only playbook files inside the fleet's "
                        "directory, by a relative path",
                    )
                )
                continue
            target = Path(rel) if Path(rel).is_absolute() else spec.base_dir / rel
            if not target.is_file():
                problems.append(
                    ConfigError(
                        f"playbook file {target} does not exist",
                        file=str(source),
                        line=line,
                        key_path=key_path,
                        hint="fix the path (relative to the fleet file), or remove the key",
                    )
                )
                continue
            if kind not in {k.value for k in PlaybookKind}:
                continue
            try:
                load_playbook_file(target, kind, scheduler=pool.scheduler.value)
            except ConfigError as exc:
                problems.append(
                    ConfigError(
                        f"playbook does not load: {exc}",
                        file=str(source),
                        line=line,
                        key_path=key_path,
                    )
                )
    return problems


def load_fleet(path: str | Path) -> FleetSpec:
    """Read, validate and default fleet.yaml.

    Returns a FleetSpec. Raises ConfigError naming the file, line, key path and a hint for
    the first problem found (schema errors first, then cross-field rules). Writes nothing.
    """
    source = Path(path)
    text = read_fleet_text(source)
    data, lines = compose_with_lines(text, str(source))
    if not isinstance(data, dict):
        raise ConfigError(
            "the fleet file must be a YAML mapping",
            file=str(source),
            line=1,
            hint="start from fleet.example.yaml",
        )
    errors = list(validator_for("fleet.schema.json").iter_errors(data))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        # best_match descends into one alternative of a oneOf/anyOf ("does not match
        # '^[0-9]{1,3}%$'" for a key that also takes an integer): report the choice instead.
        while best.parent is not None and best.parent.validator in ("oneOf", "anyOf"):
            best = best.parent
        raise schema_error(best, source, lines)
    schema = load_schema("fleet.schema.json")
    apply_defaults(data, schema, schema)
    return _build(data, source, lines)


def _rules(
    raw: list[Mapping[str, Any]],
    path: tuple[Any, ...],
    source: Path,
    lines: Mapping[tuple[Any, ...], int],
) -> tuple[Rule, ...]:
    """Compile health rules at `path`; ConfigError (file, line of the rule's `when`, key
    path, rule name, what is wrong) for a bad expression or a repeated name."""
    out: list[Rule] = []
    seen: set[str] = set()
    for i, r in enumerate(raw):
        if r["name"] in seen:
            raise ConfigError(
                f"two rules are named {r['name']!r}",
                file=str(source),
                line=line_for(lines, path + (i, "name")),
                key_path=dotted(path + (i, "name")),
                hint="rename one",
            )
        seen.add(r["name"])
        out.append(
            compile_rule(
                r["name"],
                r["when"],
                r["status"],
                r.get("action", "none"),
                file=str(source),
                line=line_for(lines, path + (i, "when")),
                key_path=dotted(path + (i, "when")),
            )
        )
    return tuple(out)


_Fail = Callable[[tuple[Any, ...], str, str], ConfigError]

#: Shortest lease: it is renewed every third of its TTL, so 3 s renews every second.
MIN_LOCK_TTL_S = 3
#: Durations of a pool's health that must be positive (a zero one makes every report stale,
#: every boot late or every drain finished at once).
_POSITIVE_HEALTH_DURATIONS = ("stale_after", "offline_after", "boot_timeout", "provision_timeout")


def _check_provider_types(providers: Mapping[str, Any], fail: _Fail) -> None:
    """Every provider type is a built-in or an installed navarch.providers plugin; else
    ConfigError naming providers.<name>.type (a typo must not wait for plan to fail)."""
    from navarch.plugins import Group, names
    from navarch.providers import BUILTIN_TYPES

    for name, cfg in providers.items():
        kind = str(cfg["type"])
        if kind in BUILTIN_TYPES:
            continue
        installed = names(Group.PROVIDERS)
        if kind in installed:
            continue
        near = difflib.get_close_matches(kind, sorted(BUILTIN_TYPES), n=1, cutoff=0.6)
        raise fail(
            ("providers", name, "type"),
            f"unknown provider type {kind!r} (no built-in, no installed plugin)",
            (f"did you mean `{near[0]}`? " if near else "")
            + f"use one of {sorted(BUILTIN_TYPES)} or install a {Group.PROVIDERS} "
            f"plugin (installed: {', '.join(installed) or 'none'})",
        )


def _build(data: dict[str, Any], source: Path, lines: Mapping[tuple[Any, ...], int]) -> FleetSpec:
    def fail(path: tuple[Any, ...], message: str, hint: str) -> ConfigError:
        return ConfigError(
            message,
            file=str(source),
            line=line_for(lines, path),
            key_path=dotted(path),
            hint=hint,
        )

    providers = data["providers"]
    _check_provider_types(providers, fail)
    fleet_rules = _rules(data["health"]["rules"], ("health", "rules"), source, lines)
    pools = [
        _ordered(
            _pool(name, raw, providers, fleet_rules, fail, source, lines), data["prices"], fail
        )
        for name, raw in data["pools"].items()
    ]
    check_placement_groups(data["pools"], providers, fail)
    for name in data["pools"]:
        full = f"{data['fleet']}-{name}-0000"
        if len(full) > 63:
            raise fail(
                ("pools", name),
                "fleet and pool names are too long for node names",
                "keep fleet + pool under 57 characters",
            )
    s = data["safety"]
    if parse_duration_s(s["lock_ttl"]) < MIN_LOCK_TTL_S:
        raise fail(
            ("safety", "lock_ttl"),
            f"lock_ttl {s['lock_ttl']} is shorter than {MIN_LOCK_TTL_S}s: the apply "
            "could not renew its lease in time and every apply would stop",
            f"use at least {MIN_LOCK_TTL_S}s; the default is 2m",
        )
    safety = SafetySpec(
        circuit_breaker_pct=float(s["circuit_breaker_pct"]),
        fleet_circuit_breaker_pct=float(s["fleet_circuit_breaker_pct"]),
        repairs_per_pool_per_hour=s["repairs_per_pool_per_hour"],
        lock_ttl_s=parse_duration_s(s["lock_ttl"]),
        max_orphan_terminations=s["max_orphan_terminations"],
        max_launches_per_run=s["max_launches_per_run"],
    )
    base_dir = source.resolve().parent
    store_url = data["store"]
    if store_url.startswith("file://"):
        p = Path(store_url[len("file://") :])
        store_url = "file://" + str(p if p.is_absolute() else (base_dir / p))
    return FleetSpec(
        name=data["fleet"],
        source=source,
        base_dir=base_dir,
        store_url=store_url,
        secret=dict(data["secret"]),
        providers={k: dict(v) for k, v in providers.items()},
        pools=tuple(pools),
        safety=safety,
        health_rules=fleet_rules,
        notify=_sinks(data.get("notify", []), fail),
        metrics=MetricsSpec(
            pushgateway=data["metrics"]["pushgateway"],
            job=data["metrics"]["job"],
            timeout_s=float(parse_duration_s(data["metrics"]["timeout"])),
        ),
        status_page=bool(data.get("status_page", False)),
        reservation_idle_after_s=parse_duration_s(data.get("reservation_idle_after", "1h")),
    )


def _pool(
    name: str,
    raw: Mapping[str, Any],
    providers: Mapping[str, Any],
    fleet_rules: tuple[Rule, ...],
    fail: _Fail,
    source: Path,
    lines: Mapping[tuple[Any, ...], int],
) -> PoolSpec:
    """One pool's defaulted mapping -> PoolSpec, with the cross-field rules a schema cannot
    say (min <= target <= max, a declared provider, provider sections matching its type).
    Raises ConfigError naming the key path."""
    nodes = raw["nodes"]
    target = nodes["target"]
    lo = nodes.get("min", 0)
    spares = nodes.get("spares", 0)
    hi = nodes.get("max", max(target + spares, lo))
    if not lo <= target <= hi:
        raise fail(
            ("pools", name, "nodes"),
            f"nodes must satisfy min <= target <= max, got min={lo} target={target} max={hi}",
            "adjust min, target or max",
        )
    if target + spares > hi:
        # Spares are launched instances: they count against max like serving nodes.
        raise fail(
            ("pools", name, "nodes", "spares"),
            f"spares must fit under max: target + spares <= max, got target={target} "
            f"spares={spares} max={hi}",
            "raise max or lower spares",
        )
    placements = _placements(name, raw, providers, fail)
    return PoolSpec(
        name=name,
        placements=placements,
        gpus_per_node=raw["gpus_per_node"],
        min_nodes=lo,
        target_nodes=target,
        max_nodes=hi,
        spare_nodes=spares,
        labels=tuple(sorted(raw["labels"].items())),
        scheduler=Scheduler(raw["scheduler"]),
        playbooks=dict(raw.get("playbooks", {})),
        ssh=dict(raw.get("ssh", {})),
        health=_health(name, raw["health"], fleet_rules, fail, source, lines),
        autoscaling=_autoscaling(name, raw["autoscaling"], fail),
        update_strategy=UpdateStrategy(raw["update"]["strategy"]),
        diagnostics=Diagnostics(
            every_s=(
                parse_duration_s(raw["diagnostics"]["every"])
                if raw["diagnostics"]["every"]
                else None
            ),
            level=raw["diagnostics"]["level"],
            time_limits_s=tuple(
                parse_duration_s(raw["diagnostics"]["time_limits"][k])
                for k in ("quick", "medium", "long")
            ),  # type: ignore[arg-type]
            tests=tuple(raw["diagnostics"]["tests"]),
        ),
        placement=raw["placement"],
        acceptance=acceptance_policy(
            name,
            raw["acceptance"],
            raw["gpus_per_node"],
            fail,
            scheduler=raw["scheduler"],
            head_node=raw.get("ssh", {}).get("head_node"),
        ),
        topology=TopologyMatch(raw["topology"]),
        zone_policy=ZonePolicy(raw["zone_policy"]),
        mode=Mode(raw.get("mode", Mode.FULL.value)),
    )


def _ordered(pool: PoolSpec, prices: Mapping[str, Mapping[str, float]], fail: _Fail) -> PoolSpec:
    """The pool with place_order set when `placement:` is not `ordered`.

    cheapest: places sorted by prices[provider][instance_type] (USD per GPU-hour), ties
    (and a placement's zones, spot before on-demand) in declared order. Another name: the
    installed navarch.placement plugin of that name scores every place (lower first, ties
    in declared order). Raises ConfigError naming the key path for a missing price or an
    unknown plugin; PluginError when the plugin fails or returns the wrong shape.
    """
    if pool.placement == "ordered":
        return pool
    declared = pool.launch_places()
    if pool.placement == "cheapest":
        for pl in pool.placed():
            for itype in pl.instance_types:
                if itype not in prices.get(pl.provider, {}):
                    raise fail(
                        ("prices", pl.provider),
                        f"pool {pool.name} uses placement: cheapest but "
                        f"prices.{pl.provider} has no price for {itype}",
                        f"add prices.{pl.provider}.{itype}: <USD per GPU-hour>",
                    )
        scores = [float(prices[p.provider][p.instance_type]) for p in declared]
    else:
        scores = _plugin_scores(pool, declared, fail)
    order = sorted(range(len(declared)), key=lambda i: (scores[i], i))
    return replace(pool, place_order=tuple(declared[i] for i in order))


def _plugin_scores(pool: PoolSpec, declared: tuple[PlaceSpec, ...], fail: _Fail) -> list[float]:
    """One score per place from the navarch.placement plugin named by pool.placement."""
    found = plugins.load(plugins.Group.PLACEMENT, pool.placement)
    if found is None:
        installed = ", ".join(plugins.names(plugins.Group.PLACEMENT)) or "none installed"
        raise fail(
            ("pools", pool.name, "placement"),
            f"placement {pool.placement!r} is neither ordered, cheapest nor an "
            f"installed navarch.placement plugin ({installed})",
            "use ordered or cheapest, or pip install the plugin",
        )
    ref, scorer = found
    placed = pool.placed()
    places = [
        {
            "provider": p.provider,
            "region": placed[p.placement].region,
            "zone": p.zone,
            "instance_type": p.instance_type,
            "capacity": "spot" if p.spot else "on-demand",
        }
        for p in declared
    ]
    scores = plugins.call(ref, scorer, places)
    if (
        not isinstance(scores, (list, tuple))
        or len(scores) != len(places)
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scores)
    ):
        raise PluginError(
            ref,
            f"returned {type(scores).__name__}, not one number per place ({len(places)} places)",
        )
    return [float(x) for x in scores]


_FLAT_KEYS = (
    "provider",
    "instance_types",
    "zones",
    "region",
    "capacity",
    "aws",
    "gcp",
    "lambda",
    "azure",
)


def _placements(
    name: str, raw: Mapping[str, Any], providers: Mapping[str, Any], fail: _Fail
) -> tuple[Placement, ...]:
    """A pool's placements: its placements: list, or its flat provider keys as the one
    placement. Raises ConfigError naming the key path when both or neither are given, a
    provider is not declared, provider settings do not match its type, a placement's
    gpus_per_node differs from the pool's, or one (provider, zone, type) is in two."""
    if "placements" in raw:
        flat = [k for k in _FLAT_KEYS if k in raw]
        if flat:
            raise fail(
                ("pools", name, flat[0]),
                f"a pool with placements: declares {flat[0]} in each placement",
                f"move {flat[0]} into the entries of placements:, or drop placements:",
            )
        entries: list[tuple[tuple[Any, ...], Mapping[str, Any]]] = [
            (("pools", name, "placements", i), e) for i, e in enumerate(raw["placements"])
        ]
    else:
        missing = [k for k in ("provider", "instance_types", "zones") if k not in raw]
        if missing:
            raise fail(
                ("pools", name),
                f"pool declares no {missing[0]} and no placements:",
                "declare provider, instance_types and zones, or a placements: list",
            )
        entries = [(("pools", name), raw)]
    out: list[Placement] = []
    seen: dict[tuple[str, str, str], int] = {}
    for i, (path, e) in enumerate(entries):
        pl = _placement(path, e, providers, fail)
        if e.get("gpus_per_node", raw["gpus_per_node"]) != raw["gpus_per_node"]:
            raise fail(
                path + ("gpus_per_node",),
                f"gpus_per_node {e['gpus_per_node']} differs from the pool's "
                f"{raw['gpus_per_node']}",
                "a pool's nodes are fungible: pick instance types with the same GPUs",
            )
        for zone, itype, _spot in pl.places():
            if seen.setdefault((pl.provider, zone, itype), i) != i:
                raise fail(
                    path + ("zones",),
                    f"{pl.provider} {zone}/{itype} is already in placement "
                    f"{seen[(pl.provider, zone, itype)]}",
                    "each provider, zone and instance type belongs to one placement",
                )
        out.append(pl)
    return tuple(out)


def _placement(
    path: tuple[Any, ...], e: Mapping[str, Any], providers: Mapping[str, Any], fail: _Fail
) -> Placement:
    if e["provider"] not in providers:
        raise fail(
            path + ("provider",),
            f"pool names provider {e['provider']!r}, which is not declared",
            f"declare it under providers: or use one of {sorted(providers)}",
        )
    ptype = providers[e["provider"]]["type"]
    _check_listed_zones(path, e, providers[e["provider"]], fail)
    for other in ("aws", "gcp", "lambda", "azure"):
        if other in e and other != ptype:
            raise fail(
                path + (other,),
                f"pool has {other} settings but its provider is of type {ptype}",
                f"move them, or remove the {other}: section",
            )
    return Placement(
        provider=e["provider"],
        provider_type=ptype,
        region=e.get("region", ""),
        zones=tuple(e["zones"]),
        instance_types=tuple(e["instance_types"]),
        capacity=e.get("capacity", "on-demand"),
        options=dict(e.get(ptype, {})),
    )


def _check_listed_zones(
    path: tuple[Any, ...], e: Mapping[str, Any], provider: Mapping[str, Any], fail: _Fail
) -> None:
    """A zone its provider lists offline (the local provider's `zones`) must be one of
    them: a mistyped zone fails validate instead of the first launch. Providers that list
    zones only through their cloud refuse an unknown zone at plan (preflight)."""
    listed = provider.get("zones")
    if not listed:
        return
    for i, zone in enumerate(e["zones"]):
        if zone not in listed:
            near = difflib.get_close_matches(zone, listed, n=1, cutoff=0.6)
            raise fail(
                path + ("zones", i),
                f"zone {zone!r} does not exist on provider {e['provider']} "
                f"(its zones: {', '.join(listed)})",
                (f"did you mean `{near[0]}`? " if near else "")
                + f"use one of providers.{e['provider']}.zones",
            )


#: The shortest agent check period: a check on 8 GPUs takes up to a second of wall time
#: (bench/agent_tick.py), so the timer leaves the node idle most of the period.
MIN_CHECK_EVERY_S = 5


def _check_every_s(name: str, h: Mapping[str, Any], fail: _Fail) -> int:
    """health.check_every in seconds; raises ConfigError (by its key path) below
    MIN_CHECK_EVERY_S."""
    every_s = parse_duration_s(h.get("check_every", "30s"))
    if every_s < MIN_CHECK_EVERY_S:
        raise fail(
            ("pools", name, "health", "check_every"),
            f"check_every must be at least {MIN_CHECK_EVERY_S}s, got {every_s}s",
            "use 10s for event-started runs, or leave the 30s default",
        )
    return every_s


def _health(
    name: str,
    h: Mapping[str, Any],
    fleet_rules: tuple[Rule, ...],
    fail: _Fail,
    source: Path,
    lines: Mapping[tuple[Any, ...], int],
) -> HealthPolicy:
    """A pool's health: mapping -> HealthPolicy (durations in seconds); the ladder must go
    cheapest first, its timeouts positive, and offline_after not shorter than stale_after."""
    for key in _POSITIVE_HEALTH_DURATIONS:
        if parse_duration_s(h[key]) <= 0:
            raise fail(
                ("pools", name, "health", key),
                f"{key} must be longer than 0s",
                "use a positive duration such as 3m",
            )
    health = HealthPolicy(
        unhealthy_after=h["unhealthy_after"],
        stale_after_s=parse_duration_s(h["stale_after"]),
        offline_after_s=parse_duration_s(h["offline_after"]),
        boot_timeout_s=parse_duration_s(h["boot_timeout"]),
        drain_timeout_s=parse_duration_s(h["drain_timeout"]),
        auto_replace=h["auto_replace"],
        max_unavailable=h["max_unavailable"],
        replacement=Replacement(h["replacement"]),
        max_surge=h["max_surge"],
        provision_timeout_s=parse_duration_s(h["provision_timeout"]),
        rules=_rules(h["rules"], ("pools", name, "health", "rules"), source, lines),
        fleet_rules=fleet_rules,
        remediation=tuple(Remedy(r) for r in h["remediation"]),
        return_after=h["return_after"],
        ladder_window_s=parse_duration_s(h["ladder_window"]),
        lemon_after=h["lemon_after"],
        lemon_window_s=parse_duration_s(h["lemon_window"]),
        return_requires_diag=h["return_requires_diag"] or None,
        return_timeout_s=parse_duration_s(h["return_timeout"]),
        surge_on=SurgeOn(h["surge_on"]),
        remedies=parse_rows(
            h.get("remedies", ()),
            ("pools", name, "health", "remedies"),
            fail,
            [r.name for r in fleet_rules] + [r["name"] for r in h["rules"]],
        ),
        block_fault_after=h["block_fault_after"],
        block_fault_window_s=parse_duration_s(h["block_fault_window"]),
        check_every_s=_check_every_s(name, h, fail),
        network=NetworkPolicy(
            h.get("network", {}).get("ports"),
            None
            if h.get("network", {}).get("rate_gbps") is None
            else float(h["network"]["rate_gbps"]),
        ),
    )
    if list(health.remediation) != sorted(health.remediation, key=lambda r: r.rank):
        raise fail(
            ("pools", name, "health", "remediation"),
            f"the remediation ladder must go from cheapest to strongest, got "
            f"{list(health.remediation)}",
            "order its rungs as reset_gpu, reboot, replace",
        )
    cost = sum(r.cost for r in health.rules + fleet_rules)
    if cost > REPORT_COST_MAX:
        raise fail(
            ("pools", name, "health", "rules"),
            f"the pool's and the fleet's rules together may visit {cost:,} list elements "
            f"per report, more than {REPORT_COST_MAX:,}",
            "merge rules that iterate the same list, or drop some",
        )
    if health.offline_after_s < health.stale_after_s:
        raise fail(
            ("pools", name, "health", "offline_after"),
            "offline_after must not be shorter than stale_after",
            "raise offline_after",
        )
    return health


def _autoscaling(name: str, a: Mapping[str, Any], fail: _Fail) -> Autoscaling:
    """A pool's autoscaling mapping -> Autoscaling; scale_down_at must be below scale_up_at."""
    auto = Autoscaling(
        enabled=a["enabled"],
        scale_up_at_pct=float(a["scale_up_at"]),
        scale_down_at_pct=float(a["scale_down_at"]),
        cooldown_s=parse_duration_s(a["cooldown"]),
    )
    if auto.scale_down_at_pct >= auto.scale_up_at_pct:
        raise fail(
            ("pools", name, "autoscaling"),
            "scale_down_at must be below scale_up_at",
            "lower scale_down_at or raise scale_up_at",
        )
    return auto


#: notify: sink types navarch ships; any other type names a navarch.notifiers plugin.
BUILTIN_SINKS = ("log", "webhook", "slack", "pagerduty")


def _check_plugin_sink(r: Mapping[str, Any], i: int, fail: _Fail) -> None:
    """A plugin sink's type must be an installed navarch.notifiers plugin; `options` is
    only for plugins. Raises ConfigError at notify[i] (before any run starts)."""
    if r["type"] in BUILTIN_SINKS:
        if "options" in r:
            raise fail(
                ("notify", i, "options"),
                f"a {r['type']} sink takes no options",
                "options are for notifier plugins; remove the key",
            )
        return
    installed = plugins.names(plugins.Group.NOTIFIERS)
    if r["type"] not in installed:
        raise fail(
            ("notify", i, "type"),
            f"no notifier plugin {r['type']!r} is installed",
            f"use one of {list(BUILTIN_SINKS)} or install a package declaring a "
            f"{plugins.Group.NOTIFIERS} entry point of that name "
            f"(installed: {', '.join(installed) or 'none'})",
        )


def _sinks(raw: list[Mapping[str, Any]], fail: _Fail) -> tuple[SinkSpec, ...]:
    """notify: items as SinkSpecs (list items get no schema defaults: they are set here).
    Raises ConfigError for a plugin type that is not installed (_check_plugin_sink)."""
    out: list[SinkSpec] = []
    for i, r in enumerate(raw):
        _check_plugin_sink(r, i, fail)
        url = r.get("url")
        out.append(
            SinkSpec(
                type=r["type"],
                name=r.get("name") or f"{r['type']}-{i + 1}",
                options=dict(r["options"]) if "options" in r else None,
                url={"value": url} if isinstance(url, str) else (dict(url) if url else None),
                path=r.get("path"),
                secret=dict(r["secret"]) if "secret" in r else None,
                routing_key=dict(r["routing_key"]) if "routing_key" in r else None,
                events=tuple(r.get("events", ())),
                min_severity=r.get("min_severity", "info"),
                timeout_s=float(parse_duration_s(r.get("timeout", "5s"))),
                retries=int(r.get("retries", 2)),
            )
        )
    return tuple(out)
