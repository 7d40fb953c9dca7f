"""Azure Blob Storage backend of the ObjectStore seam: `az://account/container/prefix`.

Versions are blob ETags as the service returns them. Conditional writes use Blob Storage's
conditional headers (source: "Specifying conditional headers for Blob service operations",
Azure Storage REST reference):

- create-if-absent: Put Blob with `If-None-Match: *` (409 BlobAlreadyExists when present)
- replace-if-version (compare-and-swap): Put Blob with `If-Match: <etag>` (412
  ConditionNotMet when it moved on, 404 BlobNotFound when the blob is gone)
- delete-if-version: Delete Blob with `If-Match: <etag>`

Every azure-core error is translated in one place, `map_error`, from the table
`ERROR_CODES` (tests/azure/test_azure_store.py checks it).

Credentials: AZURE_STORAGE_CONNECTION_STRING when set (the variable Azure tools read; also
how tests reach Azurite on 127.0.0.1), else https://<account>.blob.core.windows.net with
azure-identity's DefaultAzureCredential (managed identity, workload identity, az login).
Retries: the SDK's own ExponentialRetry policy (retry_total), not a loop here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ContainerClient

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

#: Blob service error codes this module relies on -> what each becomes. Anything else is
#: a plain StoreError. "BlobNotFound" under a condition is a lost condition (contract).
ERROR_CODES: dict[str, type[NavarchError]] = {
    "ConditionNotMet": PreconditionFailed,
    "BlobAlreadyExists": PreconditionFailed,
    "BlobNotFound": NotFound,
    "ContainerNotFound": StoreError,
}

#: Parallel Get Blob calls in get_many.
DEFAULT_MAX_WORKERS = 16
#: Attempts of the SDK's ExponentialRetry policy (throttling 503, 5xx, connection errors).
RETRY_TOTAL = 3
CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"


def map_error(exc: Exception, key: str, *, missing_is_precondition: bool = False) -> NavarchError:
    """Translate an azure-core exception raised for `key` into navarch's store errors.

    Uses ERROR_CODES on the service's x-ms-error-code; a 412 or 409 without a known code is
    PreconditionFailed, a 404 NotFound (or PreconditionFailed when missing_is_precondition,
    the contract for put(if_version=...) on a missing key); 429, 5xx and no answer at all
    (ServiceRequestError, ServiceResponseError) StoreUnavailable; anything else StoreError.
    """
    if isinstance(exc, HttpResponseError):
        raw = getattr(exc, "error_code", None) or ""
        code = str(getattr(raw, "value", raw))  # the storage SDK hands out StorageErrorCode
        kind = ERROR_CODES.get(code)
        status = exc.status_code
        if kind is None and status in (409, 412) and code in ("", "LeaseIdMissing"):
            kind = PreconditionFailed
        if kind is None and status == 404:
            kind = NotFound
        if kind is NotFound:
            if missing_is_precondition:
                return PreconditionFailed(key, "object does not exist")
            return NotFound(key)
        if kind is PreconditionFailed:
            return PreconditionFailed(key, code or str(status))
        if status is not None and (status == 429 or status >= 500):
            return StoreUnavailable(f"Azure Blob error on {key}: {code or status}: {exc.message}")
        return StoreError(f"Azure Blob error on {key}: {code or status}: {exc.message}")
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return StoreUnavailable(f"Azure Blob unreachable for {key}: {exc}")
    return StoreError(f"Azure Blob error on {key}: {exc!r}")


def blob_errors(key: str, *, missing_is_precondition: bool = False) -> AbstractContextManager[None]:
    """The one boundary every Blob Storage call goes through: azure-core exceptions leave
    as map_error(exc, key)."""

    def translate(exc: Exception) -> NavarchError | None:
        if isinstance(exc, AzureError):
            return map_error(exc, key, missing_is_precondition=missing_is_precondition)
        return None

    return map_exceptions(translate)


def _etag(value: Any) -> str:
    """An ETag in the one form this store hands out: quoted, as response headers carry it.
    List Blobs' XML gives it unquoted; without this a version from list() would never
    equal the one get() returns for the same blob."""
    text = str(value)
    return text if text.startswith('"') else f'"{text}"'


def _rfc3339(value: Any) -> str:
    return str(value.astimezone(UTC).isoformat()).replace("+00:00", "Z")


class AzureBlobStore:
    """ObjectStore on one Blob container, every key under one prefix.

    url: "az://account/container[/prefix]"; keys are relative to the prefix.
    """

    def __init__(
        self,
        account: str,
        container: str,
        prefix: str = "",
        *,
        client: ContainerClient | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
    ) -> None:
        self.account = account
        self.container = container
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"az://{account}/{container}" + (
            f"/{self.prefix.rstrip('/')}" if self.prefix else ""
        )
        self.max_workers = max(1, max_workers)
        self.parallel_gets = self.max_workers
        if client is None:
            client = _container_client(account, container)
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> AzureBlobStore:
        """Open `az://account/container[/prefix]`. Raises ConfigError for a malformed URL."""
        rest = url[len("az://") :] if url.startswith("az://") else ""
        account, _, rest = rest.partition("/")
        container, _, prefix = rest.partition("/")
        if not account or not container:
            raise ConfigError(
                f"not an Azure Blob URL: {url!r}",
                key_path="store",
                hint="write az://account/container/prefix",
            )
        return cls(account, container, prefix)

    def _key(self, key: str) -> str:
        return self.prefix + key.lstrip("/")

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """Azure Blob SAS URL with read permission, valid expires_s seconds: signed with the
        account key when a connection string carries one, else a user-delegation SAS
        (needs Microsoft.Storage/.../generateUserDelegationKey). Source: Azure Storage,
        "Create a user delegation SAS". Raises StoreError."""
        from datetime import datetime, timedelta

        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        name = self._key(key)
        start = datetime.now(UTC) - timedelta(minutes=5)  # clock skew between hosts
        expiry = datetime.now(UTC) + timedelta(seconds=int(expires_s))
        try:
            account_key = getattr(self.client.credential, "account_key", None)
            if account_key:
                kwargs: dict[str, Any] = {"account_key": account_key}
            else:
                service = BlobServiceClient(
                    self.client.primary_endpoint.rsplit("/", 1)[0],
                    credential=self.client.credential,
                )
                kwargs = {"user_delegation_key": service.get_user_delegation_key(start, expiry)}
            sas = generate_blob_sas(
                self.client.account_name,
                self.container,
                name,
                permission=BlobSasPermissions(read=True),
                start=start,
                expiry=expiry,
                **kwargs,
            )
        except (AzureError, AttributeError) as exc:
            raise map_error(exc, key) from exc
        return f"{self.client.get_blob_client(name).url}?{sas}"

    def get(self, key: str) -> Blob:
        """Read one blob -> its bytes and ETag. Raises NotFound, StoreError."""
        with blob_errors(key):
            downloader = self.client.get_blob_client(self._key(key)).download_blob()
            data = downloader.readall()
        return Blob(key=key, data=data, version=_etag(downloader.properties.etag))

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        """Write data; return the new ETag. if_absent: If-None-Match: *; if_version:
        If-Match: <etag>; neither: overwrite. Raises PreconditionFailed on a lost condition,
        StoreError otherwise; both conditions at once raises ValueError."""
        if if_absent and if_version is not None:
            raise ValueError("put: give if_absent or if_version, not both")
        kwargs: dict[str, Any] = {"overwrite": not if_absent}
        if if_version is not None:
            kwargs.update(etag=if_version, match_condition=MatchConditions.IfNotModified)
        with blob_errors(key, missing_is_precondition=if_version is not None):
            resp = self.client.get_blob_client(self._key(key)).upload_blob(data, **kwargs)
        return _etag(resp["etag"])

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        """Delete one blob, only at ETag if_version when given. Raises NotFound for a
        missing key, PreconditionFailed when the ETag moved on.

        Blob Storage answers If-Match on a missing blob with 412 ConditionNotMet, where the
        contract (and S3, GCS) say NotFound: a lost condition is told apart by asking
        whether the blob still exists."""
        kwargs: dict[str, Any] = {}
        if if_version is not None:
            kwargs.update(etag=if_version, match_condition=MatchConditions.IfNotModified)
        try:
            with blob_errors(key):
                blob = self.client.get_blob_client(self._key(key))
                blob.delete_blob(**kwargs)
        except PreconditionFailed as exc:
            with blob_errors(key):
                gone = not blob.exists()
            if gone:
                raise NotFound(key) from exc
            raise

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        """Every blob whose key starts with prefix, sorted by key (List Blobs pages).
        Raises StoreError."""
        with blob_errors(prefix):
            infos = [
                ObjectInfo(
                    key=b.name[len(self.prefix) :],
                    version=_etag(b.etag),
                    size_bytes=int(b.size),
                    modified_at=_rfc3339(b.last_modified),
                )
                for b in self.client.list_blobs(name_starts_with=self._key(prefix))
            ]
        infos.sort(key=lambda info: info.key)
        return infos

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        """Fetch many blobs on up to max_workers threads; missing keys are omitted."""
        return fetch_many(self.get, keys, self.max_workers)


def _container_client(account: str, container: str) -> ContainerClient:
    """The container's client from AZURE_STORAGE_CONNECTION_STRING, else azure-identity."""
    with blob_errors(f"az://{account}/{container}"):
        conn = os.environ.get(CONNECTION_STRING_ENV)
        if conn:
            service = BlobServiceClient.from_connection_string(conn, retry_total=RETRY_TOTAL)
        else:
            from azure.identity import DefaultAzureCredential

            service = BlobServiceClient(
                f"https://{account}.blob.core.windows.net",
                credential=DefaultAzureCredential(),
                retry_total=RETRY_TOTAL,
            )
        return service.get_container_client(container)
