"""What an apply did: one Outcome per action (its OutcomeKind, named for what happens next)
and the run's RunResult (navarch.api.ApplyResult is its public view).

Plain data on a low floor: the executor (navarch.reconcile) makes these, and the notifier
(navarch.notify), the metrics (navarch.notify.metrics), the simulator and navarch.api read them,
so none of the readers needs the reconciler to know their shape. kopf's
`_core/actions/execution.py` is the model: executing a step returns an outcome (done, or
failed for now, or failed until a human acts) instead of raising.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from navarch.errors import (
    CapacityError,
    LaunchSpent,
    PlacementError,
    RemoteError,
    StoreUnavailable,
    TransientError,
)
from navarch.inventory import Reservation
from navarch.planner.model import Action, ActionReason, DiagState, Memory, Plan
from navarch.textsafe import plain


class OutcomeKind(StrEnum):
    """How an action ended, named for what happens next (kopf's temporary and permanent
    errors). Serialised by value in the audit log."""

    #: Done.
    OK = "ok"
    #: Failed for now (throttling, a 5xx, no capacity anywhere, an SSH step): the next run
    #: observes again and plans it again.
    TRANSIENT = "transient"
    #: Fails again until a human changes something (credentials, quota, configuration, a
    #: bug in a provider or plugin).
    PERMANENT = "permanent"
    #: The executor declined to run it: the node is not in the phase the action needs, or
    #: there is no instance or runner to act on.
    REFUSED = "refused"
    #: Not run because an earlier action of the node's chain failed this run.
    SKIPPED = "skipped"


#: Errors that say "the same call may succeed later"; every other exception is permanent.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientError,
    CapacityError,
    PlacementError,
    LaunchSpent,
    RemoteError,
    StoreUnavailable,
)


def kind_of(exc: BaseException) -> OutcomeKind:
    """TRANSIENT for TRANSIENT_ERRORS (retried by the next run), PERMANENT otherwise."""
    return OutcomeKind.TRANSIENT if isinstance(exc, TRANSIENT_ERRORS) else OutcomeKind.PERMANENT


@dataclass(frozen=True)
class Outcome:
    """What happened to one action: its kind, one line of detail for people, and the
    exception it failed with (None for a success and for failures without one, e.g. a
    refusal). diag: where a DIAGNOSE left the node's diagnostics (running, or a verdict:
    pass, fail, unavailable, error), None for other actions."""

    action: Action
    kind: OutcomeKind
    detail: str
    exc: BaseException | None = None
    diag: DiagState | None = None

    def __post_init__(self) -> None:
        # A detail often quotes a node (a playbook's output tail, a diagnostic's verdict):
        # made plain here, every renderer, sink and the audit log get visible one-line text.
        object.__setattr__(self, "detail", plain(self.detail))

    @property
    def ok(self) -> bool:
        """True for OutcomeKind.OK."""
        return self.kind is OutcomeKind.OK

    @property
    def error(self) -> str | None:
        """The audit log's error name: the exception's class name, else the kind of a
        failure that has no exception, None for a success."""
        if self.exc is not None:
            return type(self.exc).__name__
        return None if self.ok else self.kind.value

    @classmethod
    def done(cls, action: Action, detail: str, *, diag: DiagState | None = None) -> Outcome:
        """A success."""
        return cls(action, OutcomeKind.OK, detail, diag=diag)

    @classmethod
    def failed(cls, action: Action, exc: BaseException, detail: str | None = None) -> Outcome:
        """A failure with its exception; kind from kind_of(exc); detail defaults to str(exc)."""
        return cls(action, kind_of(exc), str(exc) if detail is None else detail, exc)

    @classmethod
    def refused(cls, action: Action, detail: str) -> Outcome:
        """The executor declined to run the action (see OutcomeKind.REFUSED)."""
        return cls(action, OutcomeKind.REFUSED, detail)

    @classmethod
    def skipped(cls, action: Action, detail: str) -> Outcome:
        """An earlier action of the chain failed (see OutcomeKind.SKIPPED)."""
        return cls(action, OutcomeKind.SKIPPED, detail)


@dataclass(frozen=True)
class RunResult:
    """What one apply did: the plan it executed, one outcome per action in completion
    order, the Memory it left, its run id (the audit log's). audit_error: set when the
    audit log's last chunk could not be written (the actions happened and Memory records
    them; the CLI exits 1). navarch.api.ApplyResult is the public view of it."""

    plan: Plan
    outcomes: tuple[Outcome, ...]
    memory: Memory
    run_id: str
    audit_error: str | None = None
    #: the reservations the run read (navarch.inventory): the notifier's idle check
    reservations: tuple[Reservation, ...] = ()


def dead_on_arrival(outcomes: Iterable[Outcome]) -> tuple[tuple[str, str], ...]:
    """(pool, node) of each node these outcomes took out of service for failing acceptance
    (action_reason acceptance_failed or acceptance_timeout, the action done), once per node,
    sorted: a run's dead-on-arrival count (navarch.planner.acceptance decides)."""
    codes = (ActionReason.ACCEPTANCE_FAILED, ActionReason.ACCEPTANCE_TIMEOUT)
    return tuple(
        sorted(
            {
                (o.action.pool, o.action.node)
                for o in outcomes
                if o.ok and o.action.node and o.action.action_reason in codes
            }
        )
    )
