"""Extension points: plugins found through Python entry points (importlib.metadata).

A package extends navarch without a fork by declaring entry points in its pyproject.toml:

    [project.entry-points."navarch.providers"]
    baremetal = "navarch_baremetal:create"

Groups (the entry point's name is the key fleet.yaml uses):

    navarch.providers   provider `type:`      -> ProviderFactory
    navarch.stores      store URL scheme      -> StoreFactory
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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from navarch.compat import StrEnum, entry_points_of
from navarch.errors import ConfigError, NavarchError
from navarch.inventory import Instance
from navarch.providers.base import Provider, ProvisionRequest
from navarch.stores.base import Blob, ObjectInfo, ObjectStore


class Group(StrEnum):
    """The entry-point groups navarch reads."""

    PROVIDERS = "navarch.providers"
    STORES = "navarch.stores"
    NOTIFIERS = "navarch.notifiers"
    CHECKS = "navarch.checks"
    PLACEMENT = "navarch.placement"


class PluginError(ConfigError):
    """A plugin failed to load, raised outside navarch's error tree, or returned the wrong
    shape. Attributes: group, name, value (the entry point's "module:attr"), dist
    ("name version" of the distribution that declared it, or None), reason (one line)."""

    def __init__(self, plugin: PluginRef, reason: str) -> None:
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


@dataclass(frozen=True)
class PluginRef:
    """Where a plugin comes from: group, name, entry point value, distribution."""

    group: str
    name: str
    value: str
    dist: str | None


# --- the contracts --------------------------------------------------------------------


@runtime_checkable
class ProviderFactory(Protocol):
    """navarch.providers: build a Provider for one `providers.<name>` entry of fleet.yaml."""

    def __call__(
        self, name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str
    ) -> Provider:
        """Return a Provider (navarch.providers.base.Provider) named `name`.

        Inputs: name is the provider's key in fleet.yaml; config its whole mapping (with
        `type` equal to the entry point's name; navarch's schema checks only `type`, so
        validate the rest here and raise ConfigError naming `providers.<name>.<key>`);
        base_dir is the fleet file's directory (resolve relative paths against it); fleet is
        the fleet name. Must not call the cloud: navarch builds every provider before a run.

        The Provider must honour navarch.providers.base's contract:
        - list_instances(fleet) -> Sequence[Instance], every instance of the fleet
          (pending..stopped), tags as given at launch. Listing foreign instances is allowed.
        - provision(request) -> Instance, idempotent on request.launch_id: a repeated call
          (a killed run's retry) returns the instance the first call made, never a second.
        - terminate(instances), reboot(instances), update_tags(instance, tags): refuse
          instances without navarch-fleet=<fleet> (navarch.providers.base.ensure_owned)
          before any call; terminate of an instance already gone is success.
        - Errors: raise only navarch errors, mapped in one place: CapacityError or
          PlacementError (navarch falls over to the next zone/type), QuotaError, AuthError,
          TransientError (retried next run), ProviderError otherwise.

        navarch guarantees: one apply at a time per fleet (the store lease), only instances
        carrying this fleet's tags are passed to terminate/reboot/update_tags, actions on a
        node run in order, and at most `max_parallel` actions run at once per provider.
        Any other exception, or a result of the wrong type, becomes PluginError (exit 1).
        """
        ...


@runtime_checkable
class StoreFactory(Protocol):
    """navarch.stores: open an ObjectStore for a URL whose scheme is the entry point name."""

    def __call__(self, url: str) -> ObjectStore:
        """Return an ObjectStore (navarch.stores.base) for `url` ("<scheme>://...").

        The store must implement the contract in navarch.stores.base exactly: conditional
        puts (if_absent, if_version) are atomic compare-and-swap, raising PreconditionFailed
        when lost; get of a missing key raises NotFound; list is sorted by key. The lock and
        state of every fleet depend on those conditions: a store that cannot honour them
        must not be offered. Raise ConfigError for a malformed URL, StoreError for I/O.
        navarch guarantees: versions it passes back are ones this store handed out.
        """
        ...


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
        returns None. Raise a NavarchError (e.g. navarch.notify.sinks.NotifyError) when the
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


def call_within(ref: PluginRef, timeout_s: float, fn: Callable[..., Any], *args: Any,
                **kwargs: Any) -> Any:
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


_PROVIDER_METHODS = ("list_instances", "provision", "terminate", "reboot", "update_tags")
_STORE_METHODS = ("get", "put", "delete", "list", "get_many")


def _check_shape(ref: PluginRef, obj: object, kind: str, methods: Sequence[str]) -> None:
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise PluginError(
            ref, f"returned a {type(obj).__name__}, not a {kind} (missing {', '.join(missing)})"
        )


class CheckedProvider:
    """A plugin's Provider behind navarch's guard: unexpected exceptions and wrong return
    types become PluginError naming the plugin (see the module docstring)."""

    def __init__(self, ref: PluginRef, inner: Any) -> None:
        self._ref = ref
        self._inner = inner
        self.name: str = str(getattr(inner, "name", ref.name))

    def __getattr__(self, attr: str) -> Any:  # anything beyond the contract passes through
        return getattr(self._inner, attr)

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        got = call(self._ref, self._inner.list_instances, fleet)
        if not isinstance(got, (list, tuple)) or not all(isinstance(i, Instance) for i in got):
            raise PluginError(self._ref, "list_instances did not return a list of Instance")
        return tuple(got)

    def provision(self, request: ProvisionRequest) -> Instance:
        got = call(self._ref, self._inner.provision, request)
        if not isinstance(got, Instance):
            raise PluginError(
                self._ref, f"provision returned a {type(got).__name__}, not an Instance"
            )
        return got

    def terminate(self, instances: Sequence[Instance]) -> None:
        call(self._ref, self._inner.terminate, instances)

    def reboot(self, instances: Sequence[Instance]) -> None:
        call(self._ref, self._inner.reboot, instances)

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        call(self._ref, self._inner.update_tags, instance, tags)


class CheckedStore:
    """A plugin's ObjectStore behind navarch's guard (unexpected exceptions and wrong
    return types become PluginError naming the plugin)."""

    def __init__(self, ref: PluginRef, inner: Any) -> None:
        self._ref = ref
        self._inner = inner
        self.url: str = str(getattr(inner, "url", ""))
        self.parallel_gets: int = int(getattr(inner, "parallel_gets", 1))

    def get(self, key: str) -> Blob:
        got = call(self._ref, self._inner.get, key)
        if not isinstance(got, Blob):
            raise PluginError(self._ref, f"get returned a {type(got).__name__}, not a Blob")
        return got

    def put(self, key: str, data: bytes, *, if_absent: bool = False,
            if_version: str | None = None) -> str:
        got = call(self._ref, self._inner.put, key, data, if_absent=if_absent,
                   if_version=if_version)
        if not isinstance(got, str):
            raise PluginError(self._ref, f"put returned a {type(got).__name__}, not a version")
        return got

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        call(self._ref, self._inner.delete, key, if_version=if_version)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        got = call(self._ref, self._inner.list, prefix)
        if not isinstance(got, (list, tuple)) or not all(isinstance(o, ObjectInfo) for o in got):
            raise PluginError(self._ref, "list did not return a list of ObjectInfo")
        return tuple(got)

    def get_many(self, keys: Any) -> dict[str, Blob]:
        got = call(self._ref, self._inner.get_many, keys)
        if not isinstance(got, dict):
            raise PluginError(self._ref, f"get_many returned a {type(got).__name__}, not a dict")
        return got


def open_plugin_provider(
    name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str
) -> Provider | None:
    """Build provider `name` from the navarch.providers plugin named by config["type"]
    -> a guarded Provider, or None when no such plugin is installed. Raises PluginError."""
    found = load(Group.PROVIDERS, str(config.get("type")))
    if found is None:
        return None
    ref, factory = found
    provider = call(ref, factory, name, config, base_dir=base_dir, fleet=fleet)
    _check_shape(ref, provider, "Provider", _PROVIDER_METHODS)
    return CheckedProvider(ref, provider)


def open_plugin_store(url: str) -> ObjectStore | None:
    """Open `url` with the navarch.stores plugin named by its scheme -> a guarded
    ObjectStore, or None when no such plugin is installed. Raises PluginError."""
    scheme = url.split("://", 1)[0]
    found = load(Group.STORES, scheme)
    if found is None:
        return None
    ref, factory = found
    store = call(ref, factory, url)
    _check_shape(ref, store, "ObjectStore", _STORE_METHODS)
    return CheckedStore(ref, store)
