"""Render a simulation's result: the JSON document, one self-contained HTML page (SVG plots
by matplotlib inlined, templates/simulate.html.j2), the terminal summary, and the
document's action and cost keys."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from navarch.simulate.scenario import Scenario
from navarch.templating import environment

if TYPE_CHECKING:
    from navarch.simulate.engine import _Tally


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) of values by nearest rank, in their unit; None for no values.
    Every latency of a result document and a sweep's merge is computed by this rule."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


HEADLINE = (
    "availability",
    "faults",
    "wrongful_terminations",
    "faults_never_acted_on",
    "p50_fault_to_cordon_s",
    "p95_fault_to_cordon_s",
    "p50_fault_to_serving_s",
    "p95_fault_to_serving_s",
    "max_fault_to_serving_s",
    "max_capacity_recovery_s",
    "effective_training_time_ratio",
    "spare_instance_hours",
    "launches_never_booted",
    "terminations",
    "nodes_lost_to_capacity",
    "breaker_runs",
    "preemptions",
    "cost_usd",
    "served_faulty_nodes",
    "dead_on_arrival",
    "p95_acceptance_s",
    "p95_reported_fault_to_cordon_s",
    "p95_dead_host_fault_to_cordon_s",
)


def to_json(doc: dict[str, Any]) -> str:
    """The --json document: sorted keys, two-space indent, one trailing newline (stable:
    the same seed gives the same bytes)."""
    return json.dumps(doc, sort_keys=True, indent=2, default=str) + "\n"


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def plots(doc: dict[str, Any]) -> dict[str, str]:
    """SVG text of the three plots: capacity against target, faults and actions on a
    timeline, latency histograms. Constrained layout keeps every axis label and tick
    label (the timeline's event kinds are long) inside the figure. Raises MissingExtra
    without navarch[plots]."""
    from navarch.extras import import_extra

    matplotlib = import_extra("matplotlib", "plots", "navarch simulate --html")
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "navarch-simulate"  # stable ids in the SVG
    import matplotlib.pyplot as plt

    days = [p["t_s"] / 86400 for p in doc["series"]]
    fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
    ax.plot(days, [p["serving"] for p in doc["series"]], label="healthy serving nodes")
    ax.plot(days, [p["target"] for p in doc["series"]], "--", label="target")
    ax.plot(days, [p["instances"] for p in doc["series"]], ":", label="instances")
    ax.set_xlabel("day")
    ax.set_ylabel("nodes")
    ax.legend(loc="lower left")
    capacity = _svg(fig)

    fig, ax = plt.subplots(figsize=(9, 2.5), layout="constrained")
    kinds = sorted({e["kind"] for e in doc["timeline"]})
    for row, kind in enumerate(kinds):
        xs = [e["t"] / 86400 for e in doc["timeline"] if e["kind"] == kind]
        ax.plot(xs, [row] * len(xs), "|", markersize=12, label=kind)
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_xlabel("day")
    timeline = _svg(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 2.5), layout="constrained")
    for ax, key, title in (
        (axes[0], "fault_to_cordon_s", "fault -> cordon (min)"),
        (axes[1], "fault_to_serving_s", "fault -> replacement serving (min)"),
    ):
        ax.hist([v / 60 for v in doc[key]], bins=20)
        ax.set_title(title)
    latency = _svg(fig)
    return {"capacity": capacity, "timeline": timeline, "latency": latency}


def to_html(docs: list[dict[str, Any]], scenarios: list[str]) -> str:
    """One self-contained page for one or two (--compare) results side by side."""
    env = environment(autoescape=True)
    runs = [
        {"doc": d, "plots": plots(d), "scenario": s} for d, s in zip(docs, scenarios, strict=True)
    ]
    return env.get_template("simulate.html.j2").render(runs=runs, headline=HEADLINE)


def summary_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, value) rows of the headline figures. A duration (a JSON key in seconds,
    `_s`) is shown in minutes with its unit, under its name without `_s`:
    ("p50_fault_to_cordon", "50 min")."""
    rows = []
    for key in HEADLINE:
        value = doc.get(key)
        label = key.removesuffix("_s")
        if key.endswith("_s") and isinstance(value, int | float):
            text = f"{round(value / 60, 1):g} min"
        elif value is None:
            text = "n/a"
        else:
            text = str(value)
        rows.append((label, text))
    return rows


#: compare_table's columns: (heading, result key, unit: "min" shows seconds as minutes).
COMPARE_COLUMNS = (
    ("serving p50", "p50_fault_to_serving_s", "min"),
    ("serving p95", "p95_fault_to_serving_s", "min"),
    ("replacements", "replacements", ""),
    ("instance-h", "instance_hours", "sum"),
    ("spare instance-h", "spare_instance_hours", ""),
    ("training ratio", "effective_training_time_ratio", ""),
)


def compare_table(docs: list[dict[str, Any]]) -> str:
    """A Markdown table of result documents side by side, one row per run (its scenario
    name and seed): fault -> serving p50/p95 in minutes, replacements, instance-hours,
    spare instance-hours, the effective training time ratio. "n/a" for null."""
    head = ["run", *(c[0] for c in COMPARE_COLUMNS)]
    rows = [head, ["---"] * len(head)]
    for doc in docs:
        row = [f"{doc['scenario']} (seed {doc['seed']})"]
        for _, key, unit in COMPARE_COLUMNS:
            value = doc.get(key)
            if unit == "sum" and isinstance(value, dict):
                value = round(sum(value.values()), 1)
            if value is None:
                row.append("n/a")
            elif unit == "min":
                row.append(f"{value / 60:.1f} min")
            else:
                row.append(f"{value:g}" if isinstance(value, float) else str(value))
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


_ASSERT = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|==|!=|<|>)\s*([0-9.e+-]+)([smhd]?)\s*$")
_ALIASES = {
    "p95_fault_to_serving": "p95_fault_to_serving_s",
    "p50_fault_to_serving": "p50_fault_to_serving_s",
    "p95_fault_to_cordon": "p95_fault_to_cordon_s",
    "max_fault_to_cordon": "max_fault_to_cordon_s",
    "max_fault_to_serving": "max_fault_to_serving_s",
    "p50_acceptance": "p50_acceptance_s",
    "p95_acceptance": "p95_acceptance_s",
    "p95_reported_fault_to_cordon": "p95_reported_fault_to_cordon_s",
    "p95_reported_fault_to_serving": "p95_reported_fault_to_serving_s",
    "p95_dead_host_fault_to_cordon": "p95_dead_host_fault_to_cordon_s",
    "p95_dead_host_fault_to_serving": "p95_dead_host_fault_to_serving_s",
}
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def check_asserts(doc: dict[str, Any], asserts: tuple[str, ...]) -> list[dict[str, Any]]:
    """Evaluate `assert:` lines ("availability >= 0.999", "p95_fault_to_serving <= 20m")
    against a result document -> [{"assert", "ok", "value"}]. A metric that is None (e.g.
    no faults, so no latency) passes. Raises ValueError on a line it cannot parse."""
    out = []
    for line in asserts:
        m = _ASSERT.match(line)
        if not m:
            raise ValueError(f"cannot parse assert {line!r}: use METRIC OP NUMBER[s|m|h|d]")
        key, op, num, unit = m.groups()
        key = _ALIASES.get(key, key)
        if key not in doc:
            raise ValueError(f"assert {line!r}: no metric {key!r}")
        value = doc[key]
        bound = float(num) * _UNITS[unit]
        ok = (
            True
            if value is None
            else {
                "<=": value <= bound,
                ">=": value >= bound,
                "==": value == bound,
                "!=": value != bound,
                "<": value < bound,
                ">": value > bound,
            }[op]
        )
        out.append({"assert": line, "ok": bool(ok), "value": value})
    return out


def action_keys(t: _Tally) -> dict[str, Any]:
    """What navarch did: terminations (wrongful ones apart), replacements, actions, capacity
    losses and recoveries, repairs held, breaker runs, disruption, run errors."""
    w = t.world
    return {
        "faulty_nodes_terminated_before_a_replacement": len(t.terminated_unreplaced),
        "launches_never_booted": sum(
            1 for n in (*w.nodes.values(), *w.terminated.values()) if n.never_boots
        ),
        "wrongful_terminations": len(t.wrongful),
        "wrongful_termination_causes": t.wrongful[:50],
        "terminations": t.actions.get("terminate", 0),
        "scale_down_terminations": len(t.scale_downs),
        "replacements": t.actions.get("provision", 0) - t.target,
        "actions": dict(sorted(t.actions.items())),
        "nodes_lost_to_capacity": t.lost_to_capacity,
        "capacity_recovery_s": [round(x, 3) for x in t.capacity_latencies],
        "max_capacity_recovery_s": round(max(t.capacity_latencies), 3)
        if t.capacity_latencies
        else None,
        "repairs_held_by_rule": dict(sorted(t.halts.items())),
        "breaker_runs": t.breaker_runs,
        "peak_disrupted": t.peak_disrupted,
        "preemptions": w.preempted,
        "run_errors": dict(sorted(t.run_errors.items())),
    }


def cost_keys(scenario: Scenario, t: _Tally) -> dict[str, Any]:
    """What the run cost: cloud API calls per day, instance and spare hours, dollars."""
    days = scenario.duration_s / 86400
    prices = scenario.prices_usd_per_hour
    inst_h = {k: round(v / 3600, 3) for k, v in sorted(t.instance_s.items())}
    api = {k: round(v / days, 2) for k, v in sorted(t.world.api_calls.items()) if k != "list"}
    return {
        "api_calls_per_day": api,
        "instance_hours": inst_h,
        "spare_instance_hours": round(t.spare_s / 3600, 3),
        "spare_refill_s": t.spare_refills,
        "max_spare_refill_s": max(t.spare_refills) if t.spare_refills else None,
        # A spell still short at the end (the set never refilled): its length so far.
        "spare_refill_open_s": None
        if t.spares_short_since is None
        else round(scenario.duration_s - t.spares_short_since, 3),
        **t.slots.keys(t.spare_refills, scenario.duration_s),
        "cost_usd": round(sum(h * prices.get(k, 0.0) for k, h in inst_h.items()), 2),
    }
