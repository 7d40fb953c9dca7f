"""navarch's supported Python surface and its one front door: every verb, reading or
acting, as a function.

    from navarch import api

    fleet = api.load_fleet("fleet.yaml")
    api.status(fleet).to_json()      # == `navarch status fleet.yaml --json`
    api.plan(fleet).to_json()        # == `navarch plan fleet.yaml --json`
    api.history(fleet, node="demo-train-0001").to_json()   # == `navarch history ... --json`
    api.cordon(fleet, "demo-train-0002", "flaky NCCL", actor=me).to_json()

Every function here is the one place its verb is carried out: the CLI (navarch.cli) and
the MCP server (navarch.mcp.server) only parse, call these and render, so a script, an
assistant and a person at a terminal get the same document and the same errors. Each
returns a frozen value with `to_json()` (the CLI's `--json` form, valid against the
schema in `schemas/` it names where it has one). Errors are the classes of navarch.errors
(ConfigError for a bad fleet.yaml, LockHeld when another run holds the fleet's lease,
LeaseLost, StalePlan, StoreError, ProviderError; all NavarchError).

Rooms: navarch.api.results (the values), navarch.api.door (opening a fleet: the local
secret rule), navarch.api.reading (validate, plan, status, history, report, ...),
navarch.api.acting (apply, destroy, pause, resume, cordon, uncordon, reboot, adopt,
force_unlock).

Only the names in `__all__` are supported; every other module of the package is private
and may change without notice. The planner never reads a clock: pass `now` (an aware UTC
datetime) to ask about a moment, or leave it None for the current time. Acting verbs take
`clock` (a callable returning now) and `actor` (navarch.actor: who acts, recorded in the
audit log as `by`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from navarch.api.acting import (
        ApplyOptions,
        adopt,
        apply,
        cordon,
        destroy,
        force_unlock,
        pause,
        reboot,
        resume,
        uncordon,
    )
    from navarch.api.door import load_fleet
    from navarch.api.reading import (
        history,
        known_names,
        plan,
        report,
        status,
        validate,
        validate_text,
    )
    from navarch.api.results import (
        AdoptResult,
        ApplyResult,
        CloudInit,
        DestroyResult,
        HistoryResult,
        LoadedFleet,
        PlanResult,
        ReportResult,
        SavedPlan,
        StatusPage,
        StatusResult,
        UnlockResult,
        Validation,
        VerbResult,
    )
    from navarch.planner.context import PlanOptions
    from navarch.planner.model import HaltRule, Lifecycle, Plan
    from navarch.providers.base import AdoptFilter
    from navarch.reconcile.operator.adopt import AdoptPlan
    from navarch.reconcile.operator.pause import PauseResult

#: Each supported name and the module that defines it. A module is imported the first time
#: one of its names is read (PEP 562), so `navarch validate` loads the fleet reader and not
#: the reconciler.
_ROOMS: dict[str, str] = {
    **dict.fromkeys(
        (
            "ApplyOptions",
            "adopt",
            "apply",
            "cordon",
            "destroy",
            "force_unlock",
            "pause",
            "reboot",
            "resume",
            "uncordon",
        ),
        "navarch.api.acting",
    ),
    **dict.fromkeys(
        ("history", "known_names", "plan", "report", "status", "validate", "validate_text"),
        "navarch.api.reading",
    ),
    **dict.fromkeys(
        (
            "AdoptResult",
            "ApplyResult",
            "CloudInit",
            "DestroyResult",
            "HistoryResult",
            "LoadedFleet",
            "PlanResult",
            "ReportResult",
            "SavedPlan",
            "StatusPage",
            "StatusResult",
            "UnlockResult",
            "Validation",
            "VerbResult",
        ),
        "navarch.api.results",
    ),
    "load_fleet": "navarch.api.door",
    "PlanOptions": "navarch.planner.context",
    **dict.fromkeys(("HaltRule", "Lifecycle", "Plan"), "navarch.planner.model"),
    "AdoptFilter": "navarch.providers.base",
    "AdoptPlan": "navarch.reconcile.operator.adopt",
    "PauseResult": "navarch.reconcile.operator.pause",
}

#: Literal, so that linters and type checkers read the supported surface.
__all__ = [
    "ApplyOptions",
    "AdoptFilter",
    "AdoptPlan",
    "AdoptResult",
    "ApplyResult",
    "CloudInit",
    "DestroyResult",
    "HaltRule",
    "HistoryResult",
    "Lifecycle",
    "LoadedFleet",
    "PauseResult",
    "Plan",
    "PlanOptions",
    "PlanResult",
    "ReportResult",
    "SavedPlan",
    "StatusPage",
    "StatusResult",
    "UnlockResult",
    "Validation",
    "VerbResult",
    "adopt",
    "apply",
    "cordon",
    "destroy",
    "force_unlock",
    "history",
    "known_names",
    "load_fleet",
    "pause",
    "plan",
    "reboot",
    "report",
    "resume",
    "status",
    "uncordon",
    "validate",
    "validate_text",
]


def __getattr__(name: str) -> Any:
    """A name of __all__, read from its room on first use and kept here after."""
    if name not in _ROOMS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_ROOMS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, every supported one included whether it was read yet or not."""
    return sorted({*globals(), *__all__})
