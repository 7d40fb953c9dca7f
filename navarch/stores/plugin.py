"""Store plugins: the navarch.stores entry-point contract, and the guard that wraps what a
plugin builds (see navarch.plugins for discovery and the failure rule)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from navarch.errors import PluginError
from navarch.plugins import Group, PluginRef, call, check_shape, load
from navarch.stores.base import Blob, ObjectInfo, ObjectStore

__all__ = ["CheckedStore", "StoreFactory", "open_plugin_store"]

_STORE_METHODS = ("get", "put", "delete", "list", "get_many")


@runtime_checkable
class StoreFactory(Protocol):
    """navarch.stores: open an ObjectStore for a URL whose scheme is the entry point name."""

    def __call__(self, url: str) -> ObjectStore:
        """Return an ObjectStore (navarch.stores.base) for `url` ("<scheme>://...").

        The store must implement the contract in navarch.stores.base exactly: conditional
        puts (if_absent, if_version) are atomic compare-and-swap, raising PreconditionFailed
        when lost; get of a missing key raises NotFound; list is sorted by key and gives
        each object's modification time by the store's own clock (the lease is timed by
        it, so it must move with every write, to the second or finer). The lock and
        state of every fleet depend on those conditions: a store that cannot honour them
        must not be offered. Raise ConfigError for a malformed URL, StoreError for I/O.
        navarch guarantees: versions it passes back are ones this store handed out.
        """
        ...


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

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        got = call(
            self._ref, self._inner.put, key, data, if_absent=if_absent, if_version=if_version
        )
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

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        got = call(self._ref, self._inner.presigned_get_url, key, expires_s)
        if not isinstance(got, str):
            raise PluginError(self._ref, f"presigned_get_url returned a {type(got).__name__}")
        return got

    def get_many(self, keys: Any) -> dict[str, Blob]:
        got = call(self._ref, self._inner.get_many, keys)
        if not isinstance(got, dict):
            raise PluginError(self._ref, f"get_many returned a {type(got).__name__}, not a dict")
        return got


def open_plugin_store(url: str) -> ObjectStore | None:
    """Open `url` with the navarch.stores plugin named by its scheme -> a guarded
    ObjectStore, or None when no such plugin is installed. Raises PluginError."""
    scheme = url.split("://", 1)[0]
    found = load(Group.STORES, scheme)
    if found is None:
        return None
    ref, factory = found
    store = call(ref, factory, url)
    check_shape(ref, store, "ObjectStore", _STORE_METHODS)
    return CheckedStore(ref, store)
