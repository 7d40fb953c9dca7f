"""S3Store against a real S3 endpoint (moto server): what is S3's own.

The ObjectStore contract itself runs in tests/contracts/test_store_contract.py against
every backend; here: URLs, where keys land in the bucket, ListObjectsV2 paging, the
409/412 mapping and the error table.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError, NoCredentialsError

from navarch.errors import ConfigError, NotFound, PreconditionFailed, StoreError, StoreUnavailable
from navarch.stores import open_store
from navarch.stores import s3 as s3mod
from navarch.stores.s3 import S3Store
from tests.support.moto_server import client_error

BUCKET = "navarch-test"


@pytest.fixture
def store(moto) -> S3Store:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return S3Store.from_url(f"s3://{BUCKET}/fleets/prod")


def test_from_url_parses_bucket_and_prefix(moto) -> None:
    st = S3Store.from_url("s3://bkt/a/b/")
    assert (st.bucket, st.prefix, st.url) == ("bkt", "a/b/", "s3://bkt/a/b")
    bare = S3Store.from_url("s3://bkt")
    assert (bare.bucket, bare.prefix, bare.url) == ("bkt", "", "s3://bkt")
    assert isinstance(open_store("s3://bkt/x"), S3Store)
    for bad in ("gs://bkt/x", "s3://", "s3:///x"):
        with pytest.raises(ConfigError):
            S3Store.from_url(bad)


def test_keys_live_under_the_prefix_in_the_bucket(store: S3Store) -> None:
    store.put("state/f.json", b'{"serial": 1}')
    raw = boto3.client("s3").get_object(Bucket=BUCKET, Key="fleets/prod/state/f.json")
    assert raw["Body"].read() == b'{"serial": 1}'


def test_list_pages_through_list_objects_v2(moto) -> None:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    store = S3Store(BUCKET, "fleets/prod", list_page_size=10)
    calls: list[str] = []
    store.client.meta.events.register(
        "before-call.s3.ListObjectsV2", lambda **kw: calls.append("list")
    )
    client = boto3.client("s3")
    names = [f"health/f/p/n{i:04d}.json" for i in range(25)]
    for name in reversed(names):
        client.put_object(Bucket=BUCKET, Key="fleets/prod/" + name, Body=b"{}")
    client.put_object(Bucket=BUCKET, Key="fleets/prod/state/f.json", Body=b"{}")
    client.put_object(Bucket=BUCKET, Key="other/health/f/p/x.json", Body=b"{}")
    infos = store.list("health/f/")
    assert [i.key for i in infos] == names
    assert len(calls) == 3  # pages of 10, 10, 5


def test_409_conditional_request_conflict_is_precondition_failed(store: S3Store) -> None:
    # moto never races; S3 answers a concurrent conditional write with 409. Inject it.
    def conflict(**kwargs):
        return (
            AWSResponse(url="", status_code=409, headers={}, raw=None),
            {
                "Error": {"Code": "ConditionalRequestConflict", "Message": "conflict"},
                "ResponseMetadata": {"HTTPStatusCode": 409},
            },
        )

    store.client.meta.events.register("before-call.s3.PutObject", conflict)
    try:
        with pytest.raises(PreconditionFailed):
            store.put("state/f.lock", b"x", if_absent=True)
    finally:
        store.client.meta.events.unregister("before-call.s3.PutObject", conflict)


# Every S3 error code navarch relies on, and what it must become.
RELIED_ON = {
    "PreconditionFailed": PreconditionFailed,
    "ConditionalRequestConflict": PreconditionFailed,
    "NoSuchKey": NotFound,
    "404": NotFound,
    "NotFound": NotFound,
}


def test_error_mapping_table() -> None:
    mapped = set(s3mod.PRECONDITION_CODES) | set(s3mod.NOT_FOUND_CODES)
    assert mapped == set(RELIED_ON), "a relied-on S3 error code is unmapped or untested"
    for code, expected in RELIED_ON.items():
        err = s3mod.map_error(client_error(code, 400, "PutObject"), "k")
        assert type(err) is expected, code
    missing = s3mod.map_error(
        client_error("NoSuchKey", 404, "PutObject"), "k", missing_is_precondition=True
    )
    assert type(missing) is PreconditionFailed
    for exc in (client_error("AccessDenied", 403, "PutObject"), NoCredentialsError()):
        assert type(s3mod.map_error(exc, "k")) is StoreError
    for exc in (
        client_error("SlowDown", 503, "PutObject"),
        client_error("InternalError", 500, "GetObject"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ):
        assert type(s3mod.map_error(exc, "k")) is StoreUnavailable


def test_unreachable_endpoint_is_store_error(moto, monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=1),
    )
    st = S3Store("bkt", client=client)
    with pytest.raises(StoreError) as info:
        st.get("k")
    assert isinstance(info.value.__cause__, EndpointConnectionError)
