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
- list(prefix) -> ObjectInfo for every key under prefix, sorted by key. Its modified_at
  is the store's own clock at the object's last write (S3 LastModified, GCS updated,
  Azure Last-Modified, the file's mtime), to the second or finer, and every write moves
  it: the fleet's lease is timed by that one clock, never by comparing two hosts' clocks
  (navarch.reconcile.state.acquire_lock).
- Writes are atomic: a reader sees the old or the new bytes, never a mix.
- presigned_get_url(key, expires_s) -> a URL that reads the object with no credentials
  until it expires (S3 pre-signed GET, GCS V4 signed URL, Azure SAS, file:// path);
  how nodes fetch the agent bundle (navarch.reconcile.publish).
- parallel_gets: how many get() calls the backend serves well at once (the reconciler
  fetches and verifies reports on that many threads, so checking overlaps the network).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from navarch.errors import NotFound

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Blob:
    """One object's bytes and the version they were read at."""

    key: str
    data: bytes
    version: str


@dataclass(frozen=True)
class ObjectInfo:
    """Listing metadata: key, version, size_bytes, modified_at (RFC 3339 UTC string: the
    store's clock at the object's last write, at least to the second)."""

    key: str
    version: str
    size_bytes: int
    modified_at: str


class ObjectStore(Protocol):
    """Versioned object storage; see the module docstring for the contract."""

    url: str
    parallel_gets: int

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

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """A URL that GETs the object without credentials for expires_s seconds.

        Raises StoreError when the backend's credentials cannot sign one.
        """
        ...


def parallel_map(fn: Callable[[T], R], items: Sequence[T], max_workers: int) -> list[R]:
    """[fn(item) for item in items] on a bounded thread pool (in order; errors propagate).

    With max_workers <= 1 (or one item) the calls run in order on the caller's thread.
    """
    if max_workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        return list(pool.map(fn, items))


def fetch_many(
    get: Callable[[str], Blob], keys: Iterable[str], max_workers: int
) -> dict[str, Blob]:
    """Call get(key) for every distinct key on up to max_workers threads -> {key: Blob}.

    Missing keys (NotFound) are omitted; any other error propagates. The backends'
    get_many use it.
    """

    def fetch(key: str) -> Blob | None:
        try:
            return get(key)
        except NotFound:
            return None

    blobs = parallel_map(fetch, list(dict.fromkeys(keys)), max_workers)
    return {b.key: b for b in blobs if b is not None}
