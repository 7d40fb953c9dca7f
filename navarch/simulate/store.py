"""An in-memory ObjectStore on the simulator's virtual clock (see navarch.stores.base).

Versions are a global write counter; modified_at is the virtual time of the write. The
store itself never fails; the world models a store outage by stopping agents' writes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from navarch.errors import NotFound, PreconditionFailed, StoreError
from navarch.stores.base import Blob, ObjectInfo


class MemoryStore:
    """ObjectStore protocol over a dict; now() gives the virtual clock (aware UTC)."""

    url = "mem://simulate"
    parallel_gets = 1

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now
        self._objects: dict[str, tuple[bytes, str, str]] = {}
        self._infos: dict[str, ObjectInfo] = {}  # each object's listing entry
        self._keys: list[str] | None = []  # sorted keys; None after a key came or went
        self._counter = 0

    def get(self, key: str) -> Blob:
        try:
            data, version, _ = self._objects[key]
        except KeyError:
            raise NotFound(key) from None
        return Blob(key, data, version)

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        current = self._objects.get(key)
        if if_absent and current is not None:
            raise PreconditionFailed(key, "exists")
        if if_version is not None and (current is None or current[1] != if_version):
            raise PreconditionFailed(key, "version moved")
        self._counter += 1
        version = str(self._counter)
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if current is None:
            self._keys = None
        self._objects[key] = (bytes(data), version, stamp)
        self._infos[key] = ObjectInfo(key, version, len(data), stamp)
        return version

    def touch(self, key: str) -> ObjectInfo:
        """Record a write of the same report again now (an accounted heartbeat,
        navarch.simulate.heartbeats): a new version and modification time over the bytes
        already held -> its listing entry. Raises NotFound when nothing is at key."""
        current = self._objects.get(key)
        if current is None:
            raise NotFound(key)
        self._counter += 1
        version = str(self._counter)
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self._objects[key] = (current[0], version, stamp)
        info = self._infos[key] = ObjectInfo(key, version, len(current[0]), stamp)
        return info

    def version(self, key: str) -> str | None:
        """The version of the object at key (None: none there)."""
        current = self._objects.get(key)
        return current[1] if current is not None else None

    def stat(self, key: str) -> ObjectInfo | None:
        """The listing entry of the object at key (None: none there)."""
        return self._infos.get(key)

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        current = self._objects.get(key)
        if current is None:
            raise NotFound(key)
        if if_version is not None and current[1] != if_version:
            raise PreconditionFailed(key, "version moved")
        del self._objects[key]
        del self._infos[key]
        self._keys = None

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """Raises StoreError: simulated nodes run the agent in process and fetch nothing."""
        raise StoreError(f"the simulated store serves no URLs (asked for {key})")

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        if self._keys is None:
            self._keys = sorted(self._objects)
        start = bisect_left(self._keys, prefix)
        out = []
        for key in self._keys[start:]:
            if not key.startswith(prefix):
                break
            out.append(self._infos[key])
        return out

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        out: dict[str, Blob] = {}
        for key in dict.fromkeys(keys):
            if key in self._objects:
                out[key] = self.get(key)
        return out
