"""navarch's error tree. Every error navarch raises on purpose derives from NavarchError.

    NavarchError
    ├── ConfigError            bad fleet.yaml, playbook or agent config (file, line, key path)
    │   └── PluginError        an entry-point plugin failed to load, raised outside this tree,
    │                          or returned the wrong shape (group, name, entry point, reason)
    ├── StoreError             object store failure that is not a precondition
    │   ├── PreconditionFailed create-if-absent / replace-if-version lost a race (HTTP 412/409)
    │   ├── NotFound           the object does not exist
    │   └── StoreUnavailable   connection failure, timeout, throttling or 5xx; try again later
    ├── LockHeld               another run holds state/<fleet>.lock (holder, age)
    ├── LeaseLost              this apply's lease lapsed or was taken over: it stops acting
    ├── StalePlan              a saved plan whose state serial or inventory moved on
    ├── ReportRejected         a health report failed verification (reason: a RejectReason)
    ├── ProviderError          a cloud call failed; mapped at each provider's one boundary
    │   ├── CapacityError      no capacity in this place (zone/region, type); fall over
    │   ├── PlacementError     this place cannot take it (type not offered in the zone); fall over
    │   ├── LaunchSpent        the launch id already ran and its instance is gone; new launch id
    │   ├── QuotaError         account quota hit; scope says zone, region or provider
    │   ├── AuthError          credentials or permissions; nothing will work until fixed
    │   └── TransientError     throttling, 5xx, timeouts; try again on the next run
    ├── RemoteError            an SSH playbook step failed (host, command, exit code, output tail)
    └── NotifyError            a notification sink could not deliver after its retries

SDK exceptions never cross a cloud module's boundary: each provider and store module runs
every SDK call inside its one error-mapping context manager (navarch.providers.aws_errors.aws_errors,
navarch.stores.s3.s3_errors, ..., built on map_exceptions below), so a connection failure is
a TransientError from every provider and a StoreUnavailable from every store.

Errors carry their data as attributes so the CLI and the audit log can render them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from navarch.report.health_report import RejectReason


class NavarchError(Exception):
    """Root of every error navarch raises on purpose."""


class ConfigError(NavarchError):
    """A configuration document is invalid.

    Attributes: file (path or None), line (1-based or None), key_path (e.g.
    "pools.train.nodes.min" or None), hint (what to do).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key_path: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key_path = key_path
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        key = f"{self.key_path}: " if self.key_path else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}{key}{self.message}{hint}"


class PluginOrigin(Protocol):
    """Where a plugin comes from (navarch.plugins.PluginRef has this shape)."""

    @property
    def group(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    @property
    def dist(self) -> str | None: ...


class PluginError(ConfigError):
    """A plugin failed to load, raised outside navarch's error tree, or returned the wrong
    shape. Raised by navarch.plugins' guards and the notifier plugin sink.

    Attributes: group, name, value (the entry point's "module:attr"), dist ("name version"
    of the distribution that declared it, or None), reason (one line).
    """

    def __init__(self, plugin: PluginOrigin, reason: str) -> None:
        self.group = plugin.group
        self.name = plugin.name
        self.value = plugin.value
        self.dist = plugin.dist
        self.reason = reason
        origin = f" from {plugin.dist}" if plugin.dist else ""
        super().__init__(
            f"plugin {plugin.name!r} ({plugin.group} = {plugin.value}{origin}): {reason}",
            hint="fix or uninstall the plugin package",
        )


class StoreError(NavarchError):
    """An object store operation failed for a reason other than a lost precondition."""


class PreconditionFailed(StoreError):
    """A conditional write or delete lost: the object exists, or its version moved on."""

    def __init__(self, key: str, detail: str = "") -> None:
        self.key = key
        super().__init__(f"precondition failed on {key}" + (f": {detail}" if detail else ""))


class NotFound(StoreError):
    """The object does not exist."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no such object: {key}")


class StoreUnavailable(StoreError):
    """The store could not be reached or answered with throttling or a 5xx: the same call
    may succeed later. Raised by the store modules' error boundaries; callers treat it as
    any StoreError (the run stops before acting, or a read counts as doubt)."""


class LockHeld(NavarchError):
    """Another run holds the fleet lock.

    Attributes: holder (str), command (str), lock_id (str), age_s (float: how long it has
    been held), expires_in_s (float: until it lapses unless renewed). Both are measured by
    the holder's own elapsed time and the store's clock, never by comparing this host's
    clock with the holder's (navarch.reconcile.state.acquire_lock).
    """

    def __init__(self, holder: str, command: str, lock_id: str, age_s: float, expires_in_s: float):
        self.holder = holder
        self.command = command
        self.lock_id = lock_id
        self.age_s = age_s
        self.expires_in_s = expires_in_s
        super().__init__(
            f"state is locked by {holder} running {command!r} (lock {lock_id}, "
            f"taken {age_s:.0f}s ago, expires in {max(expires_in_s, 0):.0f}s)"
        )


class LeaseLost(NavarchError):
    """This run's lease on state/<fleet>.lock is no longer ours (it lapsed past its TTL
    without renewal, or another run took it over, or a human force-unlocked it). The run
    stops acting and writes no state; the holder now converges the fleet."""


class StalePlan(NavarchError):
    """A saved plan no longer matches the world: state serial or inventory fingerprint moved."""


class ReportRejected(NavarchError):
    """A health report failed verification. Attribute: reason (a
    navarch.report.health_report.RejectReason, a str serialised by its value)."""

    def __init__(self, reason: RejectReason, detail: str = "") -> None:
        self.reason = reason
        super().__init__(f"report rejected ({reason})" + (f": {detail}" if detail else ""))


class ProviderError(NavarchError):
    """A cloud provider call failed. Attributes: code (the cloud's error code), scope."""

    def __init__(self, message: str, *, code: str = "", scope: str = "") -> None:
        self.code = code
        self.scope = scope
        super().__init__(message)


class CapacityError(ProviderError):
    """The place (zone or region, instance type, capacity kind) has no capacity now.

    scope: "zone" or "region"; the executor remembers the place as exhausted and falls over.
    """


class PlacementError(ProviderError):
    """This place (zone or region, instance type) cannot take the launch as asked: the type
    is not offered in the zone, or the zone does not exist for this account. scope: "zone".

    Unlike a ConfigError it says nothing about the rest of the pool: the executor remembers
    the place with a backoff, as for capacity, says why, and tries the next place.
    """


class LaunchSpent(ProviderError):
    """The launch id (idempotency token) already ran and the instance it made is gone
    (EC2 IdempotentLaunchTerminated): this token can never launch again. The executor
    tries the next place (its own token) and moves the pool's next node index past the
    node, so the next run launches under a new name and launch id."""


class QuotaError(ProviderError):
    """An account quota blocks the launch. scope: "zone", "region" or "provider"."""


class AuthError(ProviderError):
    """Credentials are missing, expired, or lack a permission."""


class TransientError(ProviderError):
    """Throttling, a 5xx or a timeout: the action is retried on the next run."""


class RemoteError(NavarchError):
    """A playbook step failed on a host.

    Attributes: host, command, exit_code (int or None for a connection failure), output_tail.
    """

    def __init__(self, host: str, command: str, exit_code: int | None, output_tail: str) -> None:
        self.host = host
        self.command = command
        self.exit_code = exit_code
        self.output_tail = output_tail
        code = "no connection" if exit_code is None else f"exit {exit_code}"
        super().__init__(f"{host}: {command!r} failed ({code}): {output_tail[-200:]}")


class NotifyError(NavarchError):
    """A notification sink could not deliver (after its retries); raised by navarch.notify's
    sinks and logged, never raised, by the dispatcher. The message names the sink, never a
    secret or a URL."""


@contextmanager
def map_exceptions(
    translate: Callable[[Exception], NavarchError | None],
) -> Iterator[None]:
    """Run the body; an exception translate() maps is re-raised as navarch's error.

    translate(exc) returns the navarch error for an SDK exception, or None for one it does
    not know (re-raised unchanged). navarch's own errors pass through untouched. The
    mapped error is raised `from` the original, so the SDK's traceback stays readable.
    Model: httpx._transports.default.map_httpcore_exceptions.
    """
    try:
        yield
    except NavarchError:
        raise
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc
