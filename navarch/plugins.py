"""Extension points: plugins found through Python entry points (importlib.metadata).

A package extends navarch without a fork by declaring entry points in its pyproject.toml:

    [project.entry-points."navarch.providers"]
    baremetal = "navarch_baremetal:create"

Groups (the entry point's name is the key fleet.yaml uses):

    navarch.providers   provider `type:`      -> ProviderFactory (navarch.providers.plugin)
    navarch.stores      store URL scheme      -> StoreFactory (navarch.stores.plugin)
    navarch.notifiers   notify sink `type:`   -> NotifierFactory
    navarch.checks      agent check name      -> AgentCheck
    navarch.placement   placement scorer name -> PlacementScorer

Built-ins always win: a plugin named like a built-in (`aws`, `s3`, ...) is ignored, so an
installed package cannot silently replace a cloud navarch ships. Each interface below is a
typing.Protocol whose docstrings are the contract (inputs, outputs, errors to raise,
idempotency duties, and what navarch guarantees the plugin), in the manner of resolvelib's
AbstractProvider.

Failure rule: a plugin that cannot be imported, is not callable, builds an object of the
wrong shape, raises an exception outside navarch's error tree, or returns the wrong type
raises PluginError, whose one-line message names the plugin (group, name, entry point
value, distribution). Providers and stores are built when the Fleet is opened, before the
lock is taken and before any action, so such a failure never leaves a half-applied run;
the CLI prints the line and exits 1.

This module is the registry below every seam: it imports no provider or store, so
navarch.providers and navarch.stores import it (and their own plugin guards,
navarch.providers.plugin and navarch.stores.plugin) at the top, without a cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, Protocol, runtime_checkable

from navarch.errors import NavarchError, PluginError
from navarch.report.compat import StrEnum, entry_points_of


class Group(StrEnum):
    """The entry-point groups navarch reads."""

    PROVIDERS = "navarch.providers"
    STORES = "navarch.stores"
    NOTIFIERS = "navarch.notifiers"
    CHECKS = "navarch.checks"
    PLACEMENT = "navarch.placement"


@dataclass(frozen=True)
class PluginRef:
    """Where a plugin comes from: group, name, entry point value, distribution."""

    group: str
    name: str
    value: str
    dist: str | None


# --- the contracts --------------------------------------------------------------------


@runtime_checkable
class NotifierFactory(Protocol):
    """navarch.notifiers: build a sink for one `notify:` entry whose `type` is the name.

    fleet.yaml:

        notify:
          - type: teams            # the entry point's name
            name: ops-channel      # optional; default TYPE-N
            events: [breaker_tripped, capacity_exhausted]   # optional filters, as for
            min_severity: warning                           # the built-in sinks
            options: {channel: gpu-ops}                     # the plugin's own settings
    """

    def __call__(self, config: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], None]:
        """Return send(event) for one sink.

        Inputs: config is {"type", "name", "events", "min_severity", "options"} (the
        entry, defaulted; options as written, {} when absent: validate them here and raise
        ConfigError naming `notify[N].options.<key>`). Called once per apply that has
        events for this sink, after the apply, from a worker thread.

        send(event) receives one event document, navarch.notify.events.Event.to_json():
        {"event_id", "kind", "severity", "fleet", "pool", "node", "message", "details",
        "condition", "clears", "run_id"}, only events this sink's filters accept, and
        returns None. Raise a NavarchError (e.g. navarch.errors.NotifyError) when the
        event could not be delivered. send must be safe to call again for the same
        event_id (a later run may resend a condition).

        navarch guarantees: a failed, raising or wrong-shaped notifier (factory result not
        callable, send returning anything but None, an exception outside NavarchError)
        becomes a one-line PluginError naming the plugin, logged and counted as this
        sink's failed delivery; the apply already happened and its exit code is
        unchanged. A `type` naming no installed plugin fails fleet.yaml's validation, so
        the run stops before it starts.
        """
        ...


@runtime_checkable
class AgentCheck(Protocol):
    """navarch.checks: one agent-side health check run after the built-in ones."""

    def __call__(self, context: Mapping[str, Any]) -> Mapping[str, Any]:
        """Return one check result for the node described by `context`.

        Inputs: context {"fleet", "pool", "node", "instance_id", "boot_id", "gpus" (the
        report's gpus[] items), "checks" (the built-in checks' report items)}, a copy of
        the plugin's own. Output: {"status" (healthy|degraded|unknown|unhealthy),
        "message" (str), "action" (none|restart_app|reset_gpu|reboot|replace; default
        none), "evidence" (a JSON object, at most 8 KiB and 8 levels; default {})}. The
        report's check is named after the entry point and carries "plugin" (the
        distribution). Must be read-only and finish within agent.yaml's
        plugin_check_timeout_s (default 30 s).

        navarch guarantees (navarch.agent.plugin_checks): plugins run after the built-in
        checks, in name order, one at a time; a plugin that fails to load, raises, returns
        the wrong shape or times out never crashes the agent: it becomes its own check,
        degraded with action none (never unhealthy), whose message is the one-line
        PluginError naming the plugin; the report stays valid against its schema."""
        ...


@runtime_checkable
class PlacementScorer(Protocol):
    """navarch.placement: order the places a pool may launch in."""

    def __call__(self, places: Sequence[Mapping[str, Any]]) -> Sequence[float]:
        """Return one score per place (lower is tried first; ties keep declared order).
        Each place holds provider, region, zone, instance_type, capacity. Must be pure: no
        I/O, no clock, no randomness (the planner is replayable)."""
        ...


# --- discovery ------------------------------------------------------------------------


def _ref(ep: EntryPoint, group: str) -> PluginRef:
    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else None
    return PluginRef(group=group, name=ep.name, value=ep.value, dist=dist)


def discover(group: Group | str) -> dict[str, EntryPoint]:
    """The entry points installed in `group`, by name (the first one wins on duplicates)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points_of(str(group)):
        found.setdefault(ep.name, ep)
    return found


def names(group: Group | str) -> list[str]:
    """Sorted names of the plugins installed in `group`."""
    return sorted(discover(group))


def load(group: Group | str, name: str) -> tuple[PluginRef, Callable[..., Any]] | None:
    """Import the plugin `name` of `group` -> (its ref, the callable), or None if none is
    installed. Raises PluginError when it fails to import or is not callable."""
    ep = discover(group).get(name)
    if ep is None:
        return None
    ref = _ref(ep, str(group))
    try:
        obj = ep.load()
    except Exception as exc:  # any import-time failure is the plugin's, reported as one line
        raise PluginError(ref, f"failed to load: {type(exc).__name__}: {exc}") from exc
    if not callable(obj):
        raise PluginError(ref, f"{ep.value} is a {type(obj).__name__}, not a callable factory")
    return ref, obj


def call(ref: PluginRef, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with any exception outside NavarchError turned into PluginError
    naming the plugin (NavarchErrors pass through: they are the contract's own errors)."""
    try:
        return fn(*args, **kwargs)
    except NavarchError:
        raise
    except Exception as exc:
        raise PluginError(ref, f"raised {type(exc).__name__}: {exc}") from exc


def call_within(
    ref: PluginRef, timeout_s: float, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """call(ref, fn, *args, **kwargs) on a daemon thread, waiting at most timeout_s.

    Raises PluginError when fn has not returned by then (the thread is abandoned: it may
    still finish in the background, so fn must be safe to abandon), or when it raised
    anything outside NavarchError, SystemExit included (a plugin cannot end navarch).
    NavarchErrors pass through, as with call."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, call(ref, fn, *args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            if not isinstance(exc, Exception):
                exc = PluginError(ref, f"raised {type(exc).__name__}: {exc}")
            box.append((False, exc))

    worker = threading.Thread(target=run, name=f"plugin-{ref.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not box:
        raise PluginError(ref, f"did not finish within {timeout_s:g} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def check_shape(ref: PluginRef, obj: object, kind: str, methods: Sequence[str]) -> None:
    """Raise PluginError naming the plugin unless obj has every method of `methods`
    (what a plugin's factory built must be a `kind`, e.g. "Provider")."""
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise PluginError(
            ref, f"returned a {type(obj).__name__}, not a {kind} (missing {', '.join(missing)})"
        )
