"""Google Cloud Storage backend of the ObjectStore seam (`gs://bucket/prefix`).

Versions are GCS object generations (decimal strings). Conditional writes use GCS
preconditions (https://cloud.google.com/storage/docs/request-preconditions):
create-if-absent is `ifGenerationMatch=0`, replace and delete are
`ifGenerationMatch=<generation>`; a lost precondition is HTTP 412, mapped to
navarch's PreconditionFailed. Retries come from google-cloud-storage's own retry
policies: conditional calls use DEFAULT_RETRY (safe, because the precondition makes a
repeated call a no-op or a 412), unconditional overwrites of reports use it too
(idempotent: the same bytes written twice).

When STORAGE_EMULATOR_HOST is set (fake-gcs-server, tests), the client talks to the
emulator with AnonymousCredentials and the project from GOOGLE_CLOUD_PROJECT (default
"navarch-test"). Otherwise Application Default Credentials are used.

The client's bucket-metadata probe is switched off (BUCKET_METADATA_SWITCH):
google-cloud-storage 3.x otherwise fetches the bucket's metadata (`storage.buckets.get`, a
permission the reconciler's role does not grant) on a background thread at the first
object call, for tracing attributes navarch does not use, and retries it there for up to
two minutes when it fails.

Known limit: a create-if-absent whose response is lost and then retried reports
PreconditionFailed although this caller created the object; callers that care (the
lock) read the object back and compare its holder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[attr-defined]
from google.cloud.storage.retry import DEFAULT_RETRY

from navarch.errors import (
    ConfigError,
    NavarchError,
    NotFound,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
    map_exceptions,
)
from navarch.stores.base import Blob, ObjectInfo, fetch_many

__all__ = ["GCSStore", "map_error"]

#: google-cloud-storage's own switch for its background bucket-metadata probe (see the
#: module docstring); read at every call, process-wide. An operator's setting is kept.
BUCKET_METADATA_SWITCH = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"

#: Parallel downloads in get_many; below urllib3's default pool size (10) so no
#: connection is thrown away with a "pool is full" warning.
MAX_PARALLEL_GETS = 8


def map_error(exc: BaseException, key: str, *, op: str) -> NavarchError:
    """Translate a google-cloud-storage / google-auth error into navarch's store errors.

    The one error boundary of this module. op is "get", "put", "delete" or "list".
    Mapping (GCS JSON API status codes, https://cloud.google.com/storage/docs/json_api/v1/status-codes):
      412 PreconditionFailed, 409 Conflict        -> PreconditionFailed(key)
      404 NotFound on get/delete of an object     -> NotFound(key)
      404 on list (the bucket is missing)         -> StoreError
      401/403, google.auth errors                 -> StoreError (credentials or IAM)
      429, 5xx after retries, connection errors, timeouts -> StoreUnavailable
      anything else                               -> StoreError
    Every SDK call of this module runs inside gcs_errors, which calls this.
    """
    if isinstance(exc, gexc.RetryError) and exc.cause is not None:
        return map_error(exc.cause, key, op=op)
    if isinstance(exc, gexc.PreconditionFailed | gexc.Conflict):
        return PreconditionFailed(key, str(getattr(exc, "message", exc)))
    if isinstance(exc, gexc.NotFound):
        if op in ("get", "delete"):
            return NotFound(key)
        return StoreError(f"GCS bucket or object not found while {op} {key!r}: {exc.message}")
    if isinstance(exc, gexc.Unauthorized | gexc.Forbidden | auth_exc.GoogleAuthError):
        return StoreError(
            f"GCS denied {op} {key!r}: {exc} (the caller needs roles/storage.objectAdmin "
            "on the bucket, or storage.objectViewer for read-only plan)"
        )
    if isinstance(
        exc,
        gexc.TooManyRequests
        | gexc.ServerError
        | gexc.RetryError
        | requests.ConnectionError
        | requests.Timeout
        | TimeoutError
        | ConnectionError,
    ):
        return StoreUnavailable(f"GCS {op} {key!r} failed: {type(exc).__name__}: {exc}")
    return StoreError(f"GCS {op} {key!r} failed: {type(exc).__name__}: {exc}")


def gcs_errors(key: str, *, op: str) -> AbstractContextManager[None]:
    """The one boundary every GCS call goes through: any exception google-cloud-storage,
    google-auth or the HTTP transport raises leaves as map_error(exc, key, op=op)."""
    return map_exceptions(lambda exc: map_error(exc, key, op=op))


class GCSStore:
    """ObjectStore on one GCS bucket under an optional prefix.

    url: the gs:// URL it was opened with. Keys are joined to the prefix with "/".
    """

    def __init__(self, bucket: str, prefix: str = "", *, client: storage.Client | None = None):
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self.parallel_gets = MAX_PARALLEL_GETS
        self.url = f"gs://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        os.environ.setdefault(BUCKET_METADATA_SWITCH, "true")
        self._client = client if client is not None else _default_client()
        with gcs_errors("", op="open"):
            self._bucket = self._client.bucket(bucket)

    @classmethod
    def from_url(cls, url: str, *, client: storage.Client | None = None) -> GCSStore:
        """Open "gs://bucket[/prefix]". Raises ConfigError on a malformed URL."""
        if not url.startswith("gs://"):
            raise ConfigError(f"not a gs:// URL: {url!r}", key_path="store")
        rest = url[len("gs://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ConfigError(f"no bucket in store URL {url!r}", key_path="store")
        return cls(bucket, prefix, client=client)

    # -- names -----------------------------------------------------------------

    def _name(self, key: str) -> str:
        key = key.lstrip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _key(self, name: str) -> str:
        return name[len(self.prefix) + 1 :] if self.prefix else name

    # -- contract ----------------------------------------------------------------

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """GCS V4 signed URL for GET, valid expires_s seconds (Cloud Storage docs, "V4
        signing process"). Credentials without a private key (the metadata server's) sign
        through the IAM signBlob API, which needs iam.serviceAccounts.signBlob on itself.
        Against STORAGE_EMULATOR_HOST (no auth) the emulator's plain media URL.
        Raises StoreError."""
        import datetime as dt
        import urllib.parse

        name = self._name(key)
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator:
            quoted = urllib.parse.quote(name, safe="")
            return f"{emulator.rstrip('/')}/storage/v1/b/{self.bucket_name}/o/{quoted}?alt=media"
        blob = self._bucket.blob(name)
        try:
            creds = self._client._credentials
            extra: dict[str, Any] = {}
            if not hasattr(creds, "sign_bytes") or not hasattr(creds, "signer_email"):
                import google.auth.transport.requests

                creds.refresh(google.auth.transport.requests.Request())
                extra = {
                    "service_account_email": creds.service_account_email,
                    "access_token": creds.token,
                }
            return str(
                blob.generate_signed_url(
                    version="v4",
                    expiration=dt.timedelta(seconds=int(expires_s)),
                    method="GET",
                    **extra,
                )
            )
        except Exception as exc:
            raise map_error(exc, key, op="sign") from exc

    def get(self, key: str) -> Blob:
        """Read one object: its bytes and generation. Raises NotFound, StoreError."""
        blob = self._bucket.blob(self._name(key))
        with gcs_errors(key, op="get"):
            data = blob.download_as_bytes(retry=DEFAULT_RETRY)
        return Blob(key=key, data=data, version=str(blob.generation))

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_absent: bool = False,
        if_version: str | None = None,
    ) -> str:
        """Write data; return the new generation as a string.

        if_absent: create only if absent (ifGenerationMatch=0); if_version: replace only at
        that generation. Raises PreconditionFailed when the condition is lost (also for
        if_version on a missing key), StoreError otherwise. Source: GCS request preconditions.
        """
        if if_absent and if_version is not None:
            raise ValueError("put: give if_absent or if_version, not both")
        kwargs: dict[str, Any] = {}
        if if_absent:
            kwargs["if_generation_match"] = 0
        elif if_version is not None:
            kwargs["if_generation_match"] = _generation(if_version, key)
        blob = self._bucket.blob(self._name(key))
        with gcs_errors(key, op="put"):
            blob.upload_from_string(
                data, content_type="application/octet-stream", retry=DEFAULT_RETRY, **kwargs
            )
        return str(blob.generation)

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        """Delete one object, only at generation if_version when given.

        Raises NotFound for a missing key, PreconditionFailed when the generation moved on.
        """
        kwargs: dict[str, Any] = {}
        if if_version is not None:
            kwargs["if_generation_match"] = _generation(if_version, key)
        with gcs_errors(key, op="delete"):
            self._bucket.blob(self._name(key)).delete(retry=DEFAULT_RETRY, **kwargs)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        """Every object whose key starts with prefix, sorted by key. Raises StoreError."""
        with gcs_errors(prefix, op="list"):
            blobs = list(
                self._client.list_blobs(
                    self._bucket, prefix=self._name(prefix), retry=DEFAULT_RETRY
                )
            )
        infos = [
            ObjectInfo(
                key=self._key(b.name),
                version=str(b.generation),
                size_bytes=int(b.size or 0),
                modified_at=_rfc3339(b.updated),
            )
            for b in blobs
        ]
        return sorted(infos, key=lambda i: i.key)

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        """Fetch many objects in parallel (at most MAX_PARALLEL_GETS at once).

        Missing keys are omitted; any other failure raises StoreError.
        """
        return fetch_many(self.get, keys, MAX_PARALLEL_GETS)


def _default_client() -> storage.Client:
    """A storage client: anonymous against STORAGE_EMULATOR_HOST, else ADC."""
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "navarch-test")
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        return storage.Client(project=project, credentials=credentials)
    with gcs_errors("", op="open"):
        return storage.Client()


def _generation(version: str, key: str) -> int:
    try:
        return int(version)
    except ValueError as exc:
        raise PreconditionFailed(key, f"version {version!r} is not a GCS generation") from exc


def _rfc3339(value: datetime | None) -> str:
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
