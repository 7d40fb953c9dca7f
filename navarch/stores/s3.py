"""S3 backend of the ObjectStore seam: `s3://bucket/prefix`.

Versions are S3 ETags, exactly as S3 returns them (with their double quotes). Conditional
writes use S3's conditional requests:

- create-if-absent: PutObject with `If-None-Match: *`
- replace-if-version (compare-and-swap): PutObject with `If-Match: <etag>`
- delete-if-version: DeleteObject with `If-Match: <etag>`

S3 answers a lost condition with 412 PreconditionFailed, and a conditional write that races
another one on the same key with 409 ConditionalRequestConflict; both become navarch's
PreconditionFailed (source: Amazon S3 User Guide, "Conditional requests" / "Conditional
writes"). Every S3 call runs inside `s3_errors`, the module's one error boundary, which
translates botocore's exceptions with `map_error` (connection failures: StoreUnavailable).

Region, credentials and endpoint come from the standard AWS configuration chain
(environment, ~/.aws/config, instance profile), so AWS_ENDPOINT_URL points the store at a
local S3 (moto) without code changes. Retries go through botocore's "standard" retry mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

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

#: S3 error codes this module relies on, and what each becomes (tests/aws/test_s3_store.py
#: checks the table against map_error). Anything else becomes a plain StoreError.
PRECONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: Throttling and server-side failures (S3 error responses "SlowDown", "InternalError",
#: "ServiceUnavailable"; any HTTP 5xx): the same call may succeed later.
UNAVAILABLE_CODES = frozenset({"SlowDown", "InternalError", "ServiceUnavailable", "503", "500"})

#: Parallel GetObject calls in get_many; the HTTP pool is sized to match.
DEFAULT_MAX_WORKERS = 32

#: botocore's standard retry mode with its own attempt count: 3 in all, or AWS_MAX_ATTEMPTS
#: (or the profile's max_attempts) when set, as every AWS SDK reads it (AWS SDKs and Tools
#: reference guide, "Retry behavior"); a count here would override the operator's.
_RETRIES = {"mode": "standard"}


def map_error(exc: Exception, key: str, *, missing_is_precondition: bool = False) -> NavarchError:
    """Translate a botocore exception raised for `key` into navarch's store errors.

    - 412 PreconditionFailed, 409 ConditionalRequestConflict -> PreconditionFailed
      (S3 conditional writes; the 409 is a concurrent conditional write on the same key)
    - NoSuchKey / 404 -> NotFound, or PreconditionFailed when missing_is_precondition
      (the ObjectStore contract: `put(if_version=...)` on a missing key loses its condition;
      S3 itself answers If-Match on a missing key with 404 NoSuchKey)
    - UNAVAILABLE_CODES, HTTP 5xx, connection errors and timeouts -> StoreUnavailable
    - any other ClientError or BotoCoreError (e.g. no credentials) -> StoreError
    """
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in PRECONDITION_CODES:
            return PreconditionFailed(key, code)
        if code in NOT_FOUND_CODES:
            if missing_is_precondition:
                return PreconditionFailed(key, "object does not exist")
            return NotFound(key)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in UNAVAILABLE_CODES or status >= 500:
            return StoreUnavailable(f"S3 error on {key}: {code}: {exc}")
        return StoreError(f"S3 error on {key}: {code}: {exc}")
    if isinstance(
        exc,
        EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError,
    ):
        return StoreUnavailable(f"S3 unreachable for {key}: {exc}")
    if isinstance(exc, BotoCoreError):
        return StoreError(f"S3 error on {key}: {exc}")
    return StoreError(f"S3 error on {key}: {exc!r}")


def s3_errors(key: str, *, missing_is_precondition: bool = False) -> AbstractContextManager[None]:
    """The one boundary every S3 call goes through: botocore exceptions -> map_error(key)."""

    def translate(exc: Exception) -> NavarchError | None:
        if isinstance(exc, BotoCoreError | ClientError):
            return map_error(exc, key, missing_is_precondition=missing_is_precondition)
        return None

    return map_exceptions(translate)


def _rfc3339(value: Any) -> str:
    """botocore's aware datetime -> 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z'."""
    return str(value.astimezone(UTC).isoformat()).replace("+00:00", "Z")


class S3Store:
    """ObjectStore on one S3 bucket, every key under one prefix.

    url: "s3://bucket" or "s3://bucket/some/prefix"; keys passed to the methods are relative
    to the prefix ("health/<fleet>/<pool>/<node>.json").
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        list_page_size: int = 1000,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}" + (f"/{self.prefix.rstrip('/')}" if self.prefix else "")
        self.max_workers = max(1, max_workers)
        self.parallel_gets = self.max_workers
        self.list_page_size = list_page_size
        if client is None:
            # A copy: botocore writes the resolved attempt count into the dict it is given.
            config = Config(retries=dict(_RETRIES), max_pool_connections=self.max_workers)
            with s3_errors(f"s3://{bucket}"):
                client = boto3.session.Session().client("s3", config=config)
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        """Open `s3://bucket[/prefix]` with the default AWS configuration chain.

        Raises ConfigError when url is not an s3:// URL with a bucket.
        """
        if not url.startswith("s3://"):
            raise ConfigError(f"not an S3 URL: {url!r}", hint="write s3://bucket/prefix")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise ConfigError(f"S3 URL without a bucket: {url!r}", hint="write s3://bucket/prefix")
        return cls(bucket, prefix)

    def _key(self, key: str) -> str:
        return self.prefix + key.lstrip("/")

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """S3 pre-signed GetObject URL (SigV4 query string, valid expires_s seconds; the
        signer's credentials must allow s3:GetObject). Raises StoreError."""
        try:
            return str(
                self.client.generate_presigned_url(
                    "get_object",
                    Params={"Bucket": self.bucket, "Key": self._key(key)},
                    ExpiresIn=int(expires_s),
                )
            )
        except (ClientError, BotoCoreError) as exc:
            raise map_error(exc, key) from exc

    def get(self, key: str) -> Blob:
        """Read one object. Returns its bytes and ETag. Raises NotFound, StoreError."""
        with s3_errors(key):
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            data = resp["Body"].read()
        return Blob(key=key, data=data, version=resp["ETag"])

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_absent: bool = False,
        if_version: str | None = None,
    ) -> str:
        """Write data; return the new ETag.

        if_absent: PutObject If-None-Match: * (create only); if_version: PutObject
        If-Match: <etag> (compare-and-swap); neither: unconditional overwrite.
        Raises PreconditionFailed on a lost condition (412/409, or If-Match on a missing
        key), StoreError otherwise. Passing both conditions raises ValueError.
        """
        if if_absent and if_version is not None:
            raise ValueError("put: give if_absent or if_version, not both")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key), "Body": data}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        if if_version is not None:
            kwargs["IfMatch"] = if_version
        with s3_errors(key, missing_is_precondition=if_version is not None):
            resp = self.client.put_object(**kwargs)
        return str(resp["ETag"])

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        """Delete one object, only at ETag if_version when given (DeleteObject If-Match).

        Raises NotFound for a missing key, PreconditionFailed when the ETag moved on.
        S3 deletes of a missing key succeed silently, so an unconditional delete first
        checks the key exists with HeadObject (not atomic with the delete; callers that
        need atomicity pass if_version).
        """
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key)}
        with s3_errors(key):
            if if_version is None:
                self.client.head_object(**kwargs)
            else:
                kwargs["IfMatch"] = if_version
            self.client.delete_object(**kwargs)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        """Every object whose key starts with prefix, sorted by key.

        One ListObjectsV2 call per list_page_size keys (the paginator; S3's page is at most
        1,000). Raises StoreError.
        """
        infos: list[ObjectInfo] = []
        with s3_errors(prefix):
            paginator = self.client.get_paginator("list_objects_v2")
            pages = paginator.paginate(
                Bucket=self.bucket,
                Prefix=self._key(prefix),
                PaginationConfig={"PageSize": self.list_page_size},
            )
            for page in pages:
                for obj in page.get("Contents", ()):
                    infos.append(
                        ObjectInfo(
                            key=obj["Key"][len(self.prefix) :],
                            version=obj["ETag"],
                            size_bytes=int(obj["Size"]),
                            modified_at=_rfc3339(obj["LastModified"]),
                        )
                    )
        infos.sort(key=lambda info: info.key)
        return infos

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        """Fetch many objects with up to max_workers parallel GetObject calls.

        Returns {key: Blob}; missing keys are omitted. Raises StoreError on any other failure.
        """
        return fetch_many(self.get, keys, self.max_workers)
