"""The ObjectStore seam: the only place agents and the reconciler meet.

Keys are '/'-separated relative paths ("health/<fleet>/<pool>/<node>.json"). A version is
an opaque string the backend hands out (file mtime+inode token, S3 ETag, GCS generation);
callers only compare it for equality and pass it back to conditional calls.

Contract for every backend (tests/stores run one suite against each):
- get(key) -> Blob; raises NotFound.
- put(key, data, if_absent=True) creates only if absent, else PreconditionFailed.
- put(key, data, if_version=v) replaces only if the current version is v, else
  PreconditionFailed (also when the key is missing: NotFound is not raised here).
- put(key, data) with neither condition overwrites unconditionally (agents' reports).
- delete(key, if_version=v) deletes only at version v, else PreconditionFailed;
  delete of a missing key raises NotFound.
- list(prefix) -> ObjectInfo for every key under prefix, sorted by key.
- Writes are atomic: a reader sees the old or the new bytes, never a mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Blob:
    """One object's bytes and the version they were read at."""

    key: str
    data: bytes
    version: str


@dataclass(frozen=True)
class ObjectInfo:
    """Listing metadata: key, version, size_bytes, modified_at (RFC 3339 UTC string)."""

    key: str
    version: str
    size_bytes: int
    modified_at: str


class ObjectStore(Protocol):
    """Versioned object storage; see the module docstring for the contract."""

    url: str

    def get(self, key: str) -> Blob: ...

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_absent: bool = False,
        if_version: str | None = None,
    ) -> str:
        """Write data; return the new version. Raises PreconditionFailed on a lost condition."""
        ...

    def delete(self, key: str, *, if_version: str | None = None) -> None: ...

    def list(self, prefix: str) -> Sequence[ObjectInfo]: ...

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        """Fetch many objects (in parallel where the backend can); missing keys are omitted."""
        ...
