"""Opening a fleet: the one place a front door (navarch.api's verbs, hence the CLI and the
MCP server) loads fleet.yaml, opens its store and providers, and decides about the local
fleet secret.

The local secret rule: only a verb that acts (apply, destroy, cordon, uncordon, reboot,
pause, resume) creates a missing secret file of a file:// fleet (fleet_file.
ensure_local_secret). A read (plan, status, the status page, ssh's inventory) writes
nothing: when that file does not exist yet it reads what it can without a secret (no
report can verify, so each counts as rejected `no_secret` and status says so in one
line; a fresh fleet has none yet); a secret missing in any other way (an unset variable,
an unreadable file) is a ConfigError naming it, as for every verb.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.api.results import LoadedFleet
from navarch.errors import ConfigError

if TYPE_CHECKING:
    from navarch.reconcile.run import Fleet, Snapshot


def now_utc(now: datetime | None) -> datetime:
    """`now` as an aware UTC datetime (None: the system clock). Raises ConfigError for a
    naive datetime (the planner never guesses a timezone)."""
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ConfigError(
            f"now={now.isoformat()} has no timezone",
            hint="pass an aware UTC datetime, e.g. datetime.now(UTC)",
        )
    return now.astimezone(UTC)


def load_fleet(path: str | Path) -> LoadedFleet:
    """Load and validate fleet.yaml at `path` (schemas/fleet.schema.json, defaults,
    cross-field rules).

    Raises ConfigError naming the file, line and key path of the first problem (validate
    lists them all).
    """
    from navarch.fleet.load import load_fleet as _load

    return LoadedFleet(Path(path), _load(path))


def loaded(fleet: LoadedFleet | str | Path) -> LoadedFleet:
    """A LoadedFleet as given, or loaded from its path (load_fleet's errors)."""
    return fleet if isinstance(fleet, LoadedFleet) else load_fleet(fleet)


def open_fleet(fleet: LoadedFleet | str | Path, *, acting: bool) -> Fleet:
    """Open the fleet's store and providers (navarch.reconcile.run.Fleet); private to
    navarch's front doors, not part of `__all__`.

    acting: the caller changes the world, so a missing local secret file is created
    first; a read creates nothing (see the module docstring). Raises ConfigError,
    ProviderError.
    """
    from navarch.fleet.secret import ensure_local_secret, secret_path
    from navarch.reconcile.run import Fleet

    spec = loaded(fleet).spec
    if acting:
        ensure_local_secret(spec)
        return Fleet.open(spec)
    opened = Fleet.open(spec)
    path = secret_path(spec)
    if path is not None and spec.store_url.startswith("file://") and not path.exists():
        opened.secret_optional = True  # the file an acting verb would create: none yet
    return opened


def snapshot(
    fleet: LoadedFleet | Fleet, now: datetime, options: Any = None
) -> tuple[Fleet, Snapshot]:
    """One read-only look at the world (store, providers, reports) and the plan made from
    it; private to navarch's front doors (CLI, MCP), not part of `__all__`. Writes nothing
    but the verified-report cache."""
    from navarch.reconcile.run import gather

    opened = open_fleet(fleet, acting=False) if isinstance(fleet, LoadedFleet) else fleet
    return opened, gather(opened, now, options)


def one_shot() -> AbstractContextManager[None]:
    """Around a command that gathers once and exits: its gathers pause the garbage
    collector and freeze what they made (navarch.reconcile.collector.one_shot). For the
    CLI; private to navarch's front doors, not part of `__all__`."""
    from navarch.reconcile.collector import one_shot as collector_one_shot

    return collector_one_shot()
