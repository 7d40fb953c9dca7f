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

from types import ModuleType
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

#: Each supported name's room. A room is imported the first time one of its names is read
#: (PEP 562), so `navarch validate` loads the fleet reader and not the reconciler.
_ACTING = frozenset(
    {
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
    }
)
_READING = frozenset(
    {"history", "known_names", "plan", "report", "status", "validate", "validate_text"}
)
_RESULTS = frozenset(
    {
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
    }
)


def _room(name: str) -> ModuleType | None:
    """The module that defines `name`, imported now; None for a name navarch.api lacks."""
    if name in _ACTING:
        from navarch.api import acting

        return acting
    if name in _READING:
        from navarch.api import reading

        return reading
    if name in _RESULTS:
        from navarch.api import results

        return results
    if name == "load_fleet":
        from navarch.api import door

        return door
    if name == "PlanOptions":
        from navarch.planner import context

        return context
    if name in {"HaltRule", "Lifecycle", "Plan"}:
        from navarch.planner import model

        return model
    if name == "AdoptFilter":
        from navarch.providers import base

        return base
    if name == "AdoptPlan":
        from navarch.reconcile.operator import adopt

        return adopt
    if name == "PauseResult":
        from navarch.reconcile.operator import pause

        return pause
    return None


def __getattr__(name: str) -> Any:
    """A name of __all__, read from its room on first use and kept here after."""
    room = _room(name)
    if room is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(room, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, every supported one included whether it was read yet or not."""
    return sorted({*globals(), *__all__})
