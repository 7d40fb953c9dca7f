"""file://DIR backend: the embedded default object store.

Each key is a file under DIR. Versions are "<mtime_ns>-<inode>" of the file: every write
goes to a temporary file that is renamed into place, so every write makes a new inode and a
reader holding the old file still sees whole old bytes (POSIX rename atomicity).
Conditional operations take an exclusive flock on DIR/.navarch-store.lock for the
check-then-rename, so two processes on one machine cannot both win a condition.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from navarch.errors import NotFound, PreconditionFailed, StoreError
from navarch.report.compat import UTC
from navarch.stores.base import Blob, ObjectInfo, fetch_many

_LOCK_NAME = ".navarch-store.lock"
_TMP_DIR = ".tmp"


def _version(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns}-{st.st_ino}"


class FileStore:
    """ObjectStore over a local directory; see navarch.stores.base for the contract."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = f"file://{self.root}"
        self.parallel_gets = 1  # local reads gain nothing from threads

    # -- helpers ---------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if (
            not key
            or any(p in ("", ".", "..") for p in parts)
            or parts[0] in (_TMP_DIR, _LOCK_NAME)
        ):
            raise StoreError(f"invalid object key {key!r}")
        return self.root.joinpath(*parts)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / _LOCK_NAME, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _write_tmp(self, data: bytes) -> Path:
        tmp_dir = self.root / _TMP_DIR
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            os.unlink(name)
            raise
        return Path(name)

    # -- contract --------------------------------------------------------------------
    def get(self, key: str) -> Blob:
        path = self._path(key)
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                data = fh.read()
        except FileNotFoundError as exc:
            raise NotFound(key) from exc
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
        return Blob(key=key, data=data, version=_version(st))

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        """Write data; return the new version. if_absent: create only (a hard link, atomic);
        if_version: replace only at that version (under the store's lock file). Raises
        PreconditionFailed on a lost condition; both conditions at once raises ValueError
        (as S3Store and GCSStore do)."""
        if if_absent and if_version is not None:
            raise ValueError("put: give if_absent or if_version, not both")
        path = self._path(key)
        tmp = self._write_tmp(data)
        try:
            with self._locked():
                path.parent.mkdir(parents=True, exist_ok=True)
                if if_absent:
                    try:
                        os.link(tmp, path)  # atomic create-if-absent
                    except FileExistsError as exc:
                        raise PreconditionFailed(key, "object exists") from exc
                else:
                    if if_version is not None:
                        try:
                            current = _version(path.stat())
                        except FileNotFoundError as exc:
                            raise PreconditionFailed(key, "object is gone") from exc
                        if current != if_version:
                            raise PreconditionFailed(key, "version moved on")
                    os.replace(tmp, path)
                return _version(path.stat())
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        path = self._path(key)
        with self._locked():
            try:
                current = _version(path.stat())
            except FileNotFoundError as exc:
                raise NotFound(key) from exc
            if if_version is not None and current != if_version:
                raise PreconditionFailed(key, "version moved on")
            path.unlink()

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        out: list[ObjectInfo] = []
        # Walk only the directory the prefix lies in: listing one day of the audit log
        # must not cost a walk over a year of chunks (bench/history.py).
        start = self.root.joinpath(*prefix.split("/")[:-1])
        if not start.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self.root)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d != _TMP_DIR]
                rel_dir = ""
            for name in filenames:
                if not rel_dir and name == _LOCK_NAME:
                    continue
                key = f"{rel_dir}/{name}" if rel_dir else name
                key = key.replace(os.sep, "/")
                if not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue  # removed while we walked
                modified = datetime.fromtimestamp(st.st_mtime, tz=UTC).isoformat()
                out.append(ObjectInfo(key, _version(st), st.st_size, modified))
        return sorted(out, key=lambda o: o.key)

    def set_modified_at(self, key: str, when: datetime) -> str:
        """Stamp the object's modification time with `when` (aware) -> its new version.

        The local provider's simulated store time: `navarch local tick` stamps each report
        with the tick's clock, so a replayed clock and the store agree on a
        report's age as a real store's own clock and a real run do. Raises NotFound.
        """
        path = self._path(key)
        stamp_ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
        with self._locked():
            try:
                os.utime(path, ns=(stamp_ns, stamp_ns))
                return _version(path.stat())
            except FileNotFoundError as exc:
                raise NotFound(key) from exc

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """file:// URL of the object (a local path needs no signature; expires_s unused)."""
        return self._path(key).resolve().as_uri()

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        """Fetch many objects in order (local reads gain nothing from threads)."""
        return fetch_many(self.get, keys, self.parallel_gets)
