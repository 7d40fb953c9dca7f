"""S3Store against a real S3 endpoint (moto server): the ObjectStore contract."""

from __future__ import annotations

import threading

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from navarch.errors import ConfigError, NotFound, PreconditionFailed, StoreError
from navarch.stores import open_store
from navarch.stores import s3 as s3mod
from navarch.stores.s3 import S3Store

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


def test_put_get_roundtrip_under_prefix(store: S3Store) -> None:
    version = store.put("state/f.json", b'{"serial": 1}')
    blob = store.get("state/f.json")
    assert (blob.key, blob.data, blob.version) == ("state/f.json", b'{"serial": 1}', version)
    raw = boto3.client("s3").get_object(Bucket=BUCKET, Key="fleets/prod/state/f.json")
    assert raw["Body"].read() == b'{"serial": 1}'


def test_get_missing_raises_not_found(store: S3Store) -> None:
    with pytest.raises(NotFound) as info:
        store.get("state/none.json")
    assert info.value.key == "state/none.json"


def test_create_if_absent_only_once(store: S3Store) -> None:
    store.put("state/f.lock", b"first", if_absent=True)
    with pytest.raises(PreconditionFailed):
        store.put("state/f.lock", b"second", if_absent=True)
    assert store.get("state/f.lock").data == b"first"


def test_compare_and_swap(store: S3Store) -> None:
    v1 = store.put("state/f.json", b"1")
    v2 = store.put("state/f.json", b"2", if_version=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        store.put("state/f.json", b"3", if_version=v1)
    assert store.get("state/f.json").data == b"2"
    assert store.put("state/f.json", b"3", if_version=v2)


def test_if_version_on_missing_key_is_precondition_failed(store: S3Store) -> None:
    with pytest.raises(PreconditionFailed):
        store.put("state/missing.json", b"x", if_version='"0123"')
    with pytest.raises(NotFound):
        store.get("state/missing.json")


def test_unconditional_put_overwrites(store: S3Store) -> None:
    store.put("health/f/p/n.json", b"a")
    store.put("health/f/p/n.json", b"b")
    assert store.get("health/f/p/n.json").data == b"b"


def test_both_conditions_is_a_caller_error(store: S3Store) -> None:
    with pytest.raises(ValueError):
        store.put("k", b"x", if_absent=True, if_version='"v"')


def test_conditional_delete(store: S3Store) -> None:
    v1 = store.put("state/f.lock", b"mine", if_absent=True)
    store.put("state/f.lock", b"theirs")
    with pytest.raises(PreconditionFailed):
        store.delete("state/f.lock", if_version=v1)
    current = store.get("state/f.lock").version
    store.delete("state/f.lock", if_version=current)
    with pytest.raises(NotFound):
        store.get("state/f.lock")


def test_delete_missing_raises_not_found(store: S3Store) -> None:
    with pytest.raises(NotFound):
        store.delete("state/none.lock")
    with pytest.raises(NotFound):
        store.delete("state/none.lock", if_version='"abc"')
    store.put("x", b"1")
    store.delete("x")
    with pytest.raises(NotFound):
        store.get("x")


def test_list_sorted_with_metadata_and_paginated(moto) -> None:
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
    first = infos[0]
    assert first.size_bytes == 2
    assert first.version == store.get(first.key).version
    assert first.modified_at.endswith("Z") and first.modified_at[4] == "-"
    assert store.list("nothing/") == []


def test_get_many_parallel_omits_missing(store: S3Store) -> None:
    keys = [f"health/f/p/n{i}.json" for i in range(50)]
    for i, key in enumerate(keys):
        store.put(key, str(i).encode())
    got = store.get_many(keys + ["health/f/p/missing.json", keys[0]])
    assert sorted(got) == sorted(keys)
    assert all(got[k].data == str(i).encode() for i, k in enumerate(keys))
    assert store.get_many([]) == {}


def test_concurrent_create_if_absent_has_one_winner(store: S3Store) -> None:
    winners: list[int] = []
    losers: list[int] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            store.put("state/race.lock", str(i).encode(), if_absent=True)
            winners.append(i)
        except PreconditionFailed:
            losers.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert store.get("state/race.lock").data == str(winners[0]).encode()


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


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


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
        err = s3mod.map_error(_client_error(code, 400), "k")
        assert type(err) is expected, code
    missing = s3mod.map_error(_client_error("NoSuchKey", 404), "k", missing_is_precondition=True)
    assert type(missing) is PreconditionFailed
    for exc in (
        _client_error("AccessDenied", 403),
        _client_error("SlowDown", 503),
        NoCredentialsError(),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ):
        assert type(s3mod.map_error(exc, "k")) is StoreError


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
