"""The agent's own object-store client: read and write one report over HTTPS, stdlib only.

The agent bundle runs on a bare system Python (no boto3, google or azure SDKs), and the
agent needs two calls per run: read its previous report (the sequence floor) and write
the new one. This module does exactly that for each backend the reconciler reads:

- ``s3://bucket/prefix``: GetObject / PutObject signed with AWS Signature Version 4.
  Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
  instance role from IMDSv2 (``PUT /latest/api/token``, then
  ``/latest/meta-data/iam/security-credentials/<role>``). Region: AWS_REGION,
  AWS_DEFAULT_REGION, else IMDS ``placement/region``. Endpoint: AWS_ENDPOINT_URL_S3 or
  AWS_ENDPOINT_URL (path-style; moto, MinIO), else
  ``https://<bucket>.s3.<region>.amazonaws.com``. Source: AWS General Reference,
  "Signature Version 4 signing process"; EC2 User Guide, "Use IMDSv2".
- ``gs://bucket/prefix``: JSON API media download and ``uploadType=media`` upload with the
  metadata server's token (``instance/service-accounts/default/token``). Endpoint:
  STORAGE_EMULATOR_HOST (anonymous), else ``https://storage.googleapis.com``. Source: Cloud
  Storage JSON API, "Objects: insert" / "Objects: get".
- ``az://account/container/prefix``: Get Blob / Put Blob (BlockBlob) with the managed
  identity's token from IMDS (resource ``https://storage.azure.com/``), or Shared Key when
  AZURE_STORAGE_CONNECTION_STRING is set (Azurite, on-premises). Source: Azure Storage REST
  API, "Put Blob", "Authorize with Shared Key".
- ``file://DIR``: navarch.stores.file.

Everything else (plugins' schemes) goes to navarch.stores.open_store. Errors: NotFound for
a missing object, StoreError for every other failure (with the HTTP status and the
service's error text), ConfigError for a malformed URL.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from navarch.errors import ConfigError, NotFound, StoreError
from navarch.report.compat import UTC
from navarch.stores.base import Blob

__all__ = ["open_agent_store", "HttpStore", "sigv4_headers", "AwsCredentials"]

#: Seconds per store request; a timer tick must finish well inside its unit's timeout.
REQUEST_TIMEOUT_S = 10.0
#: Seconds per link-local metadata request (credentials, tokens, region).
METADATA_TIMEOUT_S = 2.0
AWS_IMDS = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal"
AZURE_IMDS = "http://169.254.169.254"
AZURE_API_VERSION = "2021-08-06"

Headers = dict[str, str]


@dataclass(frozen=True)
class AwsCredentials:
    """One set of AWS credentials (session token empty for long-term keys)."""

    access_key_id: str
    secret_access_key: str
    session_token: str = ""


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    headers: Headers


def _request(
    method: str,
    url: str,
    headers: Headers,
    data: bytes | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    proxies: bool = True,
) -> _Response:
    """One HTTP request; any status is a response, a network failure raises StoreError."""
    handlers = [] if proxies else [urllib.request.ProxyHandler({})]
    opener = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            return _Response(resp.status, resp.read(), dict(resp.headers.items()))
    except urllib.error.HTTPError as exc:
        return _Response(exc.code, exc.read(), dict(exc.headers.items()))
    except (OSError, ValueError) as exc:
        raise StoreError(f"{method} {url.split('?')[0]}: {exc}") from exc


def _metadata(method: str, url: str, headers: Headers) -> str:
    """A link-local metadata call (never through a proxy); StoreError unless 200."""
    r = _request(
        method,
        url,
        headers,
        data=b"" if method == "PUT" else None,
        timeout_s=METADATA_TIMEOUT_S,
        proxies=False,
    )
    if r.status != 200:
        raise StoreError(f"metadata {url}: HTTP {r.status}: {r.body[:200]!r}")
    return r.body.decode()


# --- S3: Signature Version 4 -------------------------------------------------------------


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_headers(
    method: str,
    url: str,
    headers: Headers,
    payload: bytes,
    creds: AwsCredentials,
    region: str,
    now: datetime,
    service: str = "s3",
) -> Headers:
    """The request's headers with AWS Signature Version 4 added (Authorization, X-Amz-Date,
    X-Amz-Content-Sha256, X-Amz-Security-Token when a session token is set).

    url: the full request URL (its query is signed). now: aware UTC time of the signature.
    Source: AWS General Reference, "Create a signed AWS API request" (SigV4).
    """
    parts = urllib.parse.urlsplit(url)
    amz_date = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = dict(headers)
    out["Host"] = parts.netloc
    out["X-Amz-Date"] = amz_date
    out["X-Amz-Content-Sha256"] = _sha256_hex(payload)
    if creds.session_token:
        out["X-Amz-Security-Token"] = creds.session_token
    canon = {k.lower().strip(): " ".join(str(v).split()) for k, v in out.items()}
    signed = ";".join(sorted(canon))
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(query)
    )
    canonical = "\n".join(
        [
            method,
            urllib.parse.quote(urllib.parse.unquote(parts.path) or "/", safe="/-_.~"),
            canonical_query,
            "".join(f"{k}:{canon[k]}\n" for k in sorted(canon)),
            signed,
            out["X-Amz-Content-Sha256"],
        ]
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, _sha256_hex(canonical.encode())])
    key = _hmac(("AWS4" + creds.secret_access_key).encode(), amz_date[:8])
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key_id}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return out


def _imds_token() -> str:
    return _metadata(
        "PUT", f"{AWS_IMDS}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    )


def aws_credentials() -> AwsCredentials:
    """Credentials from the environment, else the instance role (IMDSv2). Raises StoreError."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return AwsCredentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN", "")
        )
    token = {"X-aws-ec2-metadata-token": _imds_token()}
    base = f"{AWS_IMDS}/latest/meta-data/iam/security-credentials/"
    role = _metadata("GET", base, token).splitlines()[0].strip()
    doc = json.loads(_metadata("GET", base + role, token))
    return AwsCredentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token", ""))


def aws_region() -> str:
    """AWS_REGION, AWS_DEFAULT_REGION, else the instance's region from IMDSv2."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    token = {"X-aws-ec2-metadata-token": _imds_token()}
    return _metadata("GET", f"{AWS_IMDS}/latest/meta-data/placement/region", token).strip()


# --- GCS and Azure tokens -----------------------------------------------------------------


def _gcp_token() -> str:
    doc = json.loads(
        _metadata(
            "GET",
            f"{GCP_METADATA}/computeMetadata/v1/instance/service-accounts/default/token",
            {"Metadata-Flavor": "Google"},
        )
    )
    return str(doc["access_token"])


def _azure_token() -> str:
    params = {"api-version": "2018-02-01", "resource": "https://storage.azure.com/"}
    if os.environ.get("AZURE_CLIENT_ID"):  # one of several user-assigned identities
        params["client_id"] = os.environ["AZURE_CLIENT_ID"]
    query = urllib.parse.urlencode(params)
    doc = json.loads(
        _metadata(
            "GET", f"{AZURE_IMDS}/metadata/identity/oauth2/token?{query}", {"Metadata": "true"}
        )
    )
    return str(doc["access_token"])


def _connection_string(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def _shared_key_headers(
    method: str, url: str, headers: Headers, length: int, account: str, key_b64: str
) -> Headers:
    """Azure Storage Shared Key authorization (2009-09-19 and later string-to-sign)."""
    parts = urllib.parse.urlsplit(url)
    out = dict(headers)
    out["x-ms-date"] = datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    lower = {k.lower(): v for k, v in out.items()}
    ms = "".join(f"{k}:{lower[k]}\n" for k in sorted(lower) if k.startswith("x-ms-"))
    resource = f"/{account}{parts.path}"
    for k, v in sorted(urllib.parse.parse_qsl(parts.query)):
        resource += f"\n{k.lower()}:{v}"
    fields = [
        "content-encoding",
        "content-language",
        None,
        "content-md5",
        "content-type",
        "date",
        "if-modified-since",
        "if-match",
        "if-none-match",
        "if-unmodified-since",
        "range",
    ]
    values = [(str(length) if length else "") if f is None else lower.get(f, "") for f in fields]
    to_sign = "\n".join([method, *values, ms + resource])
    sig = base64.b64encode(
        hmac.new(base64.b64decode(key_b64), to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    out["Authorization"] = f"SharedKey {account}:{sig}"
    return out


# --- one store -----------------------------------------------------------------------------

Signer = Callable[[str, str, Headers, bytes], Headers]


class HttpStore:
    """get/put of whole objects over HTTP(S): the two calls an agent run makes.

    url: the store URL it was opened from; object_url(key) -> the object's HTTP URL;
    upload_url(key) -> where a PUT/POST of the object goes; sign(method, url, headers,
    payload) -> headers with authorization.
    """

    parallel_gets = 1

    def __init__(
        self,
        url: str,
        object_url: Callable[[str], str],
        upload: Callable[[str], tuple[str, str]],
        sign: Signer,
        extra_put_headers: Headers | None = None,
    ) -> None:
        self.url = url
        self._object_url = object_url
        self._upload = upload
        self._sign = sign
        self._extra_put_headers = dict(extra_put_headers or {})

    def get(self, key: str) -> Blob:
        """The object's bytes and ETag. Raises NotFound, StoreError."""
        url = self._object_url(key)
        r = _request("GET", url, self._sign("GET", url, {}, b""))
        if r.status == 404:
            raise NotFound(key)
        if r.status != 200:
            raise StoreError(f"GET {key}: HTTP {r.status}: {r.body[:300]!r}")
        return Blob(key=key, data=r.body, version=_etag(r.headers))

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        """Overwrite the object unconditionally (an agent's report); return its ETag.

        The conditional forms belong to the reconciler (navarch.stores); asking for one
        here raises ValueError. Raises StoreError on any HTTP failure.
        """
        if if_absent or if_version is not None:
            raise ValueError("the agent's store client writes unconditionally only")
        method, url = self._upload(key)
        headers = {"Content-Type": "application/json", **self._extra_put_headers}
        r = _request(method, url, self._sign(method, url, headers, data), data=data)
        if r.status not in (200, 201):
            raise StoreError(f"{method} {key}: HTTP {r.status}: {r.body[:300]!r}")
        return _etag(r.headers)


def _etag(headers: Headers) -> str:
    lower = {k.lower(): v for k, v in headers.items()}
    return lower.get("etag", "") or lower.get("x-goog-generation", "")


def _split(url: str, scheme: str, what: str) -> tuple[str, str]:
    rest = url[len(scheme) :]
    head, _, prefix = rest.partition("/")
    if not head:
        raise ConfigError(f"store URL without a {what}: {url!r}", key_path="store")
    prefix = prefix.strip("/")
    return head, prefix + "/" if prefix else ""


def _s3(url: str) -> HttpStore:
    bucket, prefix = _split(url, "s3://", "bucket")
    state: dict[str, Any] = {}

    def setting() -> tuple[AwsCredentials, str]:
        if not state:
            state["creds"], state["region"] = aws_credentials(), aws_region()
        return state["creds"], state["region"]

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")

    def object_url(key: str) -> str:
        path = urllib.parse.quote(prefix + key.lstrip("/"), safe="/-_.~")
        if endpoint:
            return f"{endpoint.rstrip('/')}/{bucket}/{path}"
        return f"https://{bucket}.s3.{setting()[1]}.amazonaws.com/{path}"

    def sign(method: str, u: str, headers: Headers, payload: bytes) -> Headers:
        creds, region = setting()
        return sigv4_headers(method, u, headers, payload, creds, region, datetime.now(UTC))

    return HttpStore(url, object_url, lambda key: ("PUT", object_url(key)), sign)


def _gcs(url: str) -> HttpStore:
    bucket, prefix = _split(url, "gs://", "bucket")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").rstrip("/")
    base = emulator or "https://storage.googleapis.com"
    token: dict[str, str] = {}

    def object_url(key: str) -> str:
        name = urllib.parse.quote(prefix + key.lstrip("/"), safe="")
        return f"{base}/storage/v1/b/{bucket}/o/{name}?alt=media"

    def upload(key: str) -> tuple[str, str]:
        query = urllib.parse.urlencode({"uploadType": "media", "name": prefix + key.lstrip("/")})
        return "POST", f"{base}/upload/storage/v1/b/{bucket}/o?{query}"

    def sign(method: str, u: str, headers: Headers, payload: bytes) -> Headers:
        if emulator:
            return dict(headers)
        if not token:
            token["value"] = _gcp_token()
        return {**headers, "Authorization": f"Bearer {token['value']}"}

    return HttpStore(url, object_url, upload, sign)


def _azure(url: str) -> HttpStore:
    account, rest = _split(url, "az://", "storage account")
    container, _, prefix = rest.partition("/")
    if not container:
        raise ConfigError(
            f"store URL without a container: {url!r}",
            key_path="store",
            hint="write az://account/container/prefix",
        )
    conn = _connection_string(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    if conn.get("BlobEndpoint"):
        base = conn["BlobEndpoint"].rstrip("/")
    else:
        base = f"https://{account}.blob.core.windows.net"
    shared = (conn.get("AccountName", ""), conn.get("AccountKey", ""))
    token: dict[str, str] = {}

    def object_url(key: str) -> str:
        path = urllib.parse.quote(f"{container}/{prefix}{key.lstrip('/')}", safe="/-_.~")
        return f"{base}/{path}"

    def sign(method: str, u: str, headers: Headers, payload: bytes) -> Headers:
        out = {**headers, "x-ms-version": AZURE_API_VERSION}
        if shared[0] and shared[1]:
            return _shared_key_headers(method, u, out, len(payload), shared[0], shared[1])
        if not token:
            token["value"] = _azure_token()
        out["x-ms-date"] = datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
        out["Authorization"] = f"Bearer {token['value']}"
        return out

    return HttpStore(
        url,
        object_url,
        lambda key: ("PUT", object_url(key)),
        sign,
        extra_put_headers={"x-ms-blob-type": "BlockBlob"},
    )


def open_agent_store(url: str) -> Any:
    """The store an agent run writes its report to (see the module docstring).

    Returns an object with get(key) -> Blob and put(key, data) -> version. Raises
    ConfigError for a malformed or unknown URL.
    """
    if url.startswith("s3://"):
        return _s3(url)
    if url.startswith("gs://"):
        return _gcs(url)
    if url.startswith("az://"):
        return _azure(url)
    from navarch.stores import open_store

    return open_store(url)
