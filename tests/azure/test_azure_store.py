"""The ObjectStore contract on Azure Blob Storage (Azurite on 127.0.0.1)."""

from __future__ import annotations

import threading

import pytest
from azure.core.exceptions import HttpResponseError

from navarch.errors import ConfigError, NotFound, PreconditionFailed, StoreError, StoreUnavailable
from navarch.stores import open_store
from navarch.stores.azure import ERROR_CODES, AzureBlobStore, map_error
from tests.support.azure_servers import ACCOUNT


def store(container: str, prefix: str = "navarch") -> AzureBlobStore:
    opened = open_store(f"az://{ACCOUNT}/{container}/{prefix}")
    assert isinstance(opened, AzureBlobStore)
    return opened


def test_get_put_list_delete(az_container: str) -> None:
    s = store(az_container)
    v1 = s.put("health/f/p/n1.json", b"one")
    s.put("health/f/p/n0.json", b"zero")
    blob = s.get("health/f/p/n1.json")
    assert (blob.data, blob.version) == (b"one", v1)
    assert [i.key for i in s.list("health/f/")] == ["health/f/p/n0.json", "health/f/p/n1.json"]
    assert s.list("health/f/")[1].size_bytes == 3
    assert set(s.get_many(["health/f/p/n1.json", "nope"])) == {"health/f/p/n1.json"}
    s.delete("health/f/p/n1.json", if_version=v1)
    with pytest.raises(NotFound):
        s.get("health/f/p/n1.json")
    with pytest.raises(NotFound):
        s.delete("health/f/p/n1.json")


def test_create_if_absent_is_exclusive(az_container: str) -> None:
    s = store(az_container)
    s.put("state/f.lock", b"a", if_absent=True)
    with pytest.raises(PreconditionFailed):
        s.put("state/f.lock", b"b", if_absent=True)
    assert s.get("state/f.lock").data == b"a"


def test_compare_and_swap(az_container: str) -> None:
    s = store(az_container)
    v1 = s.put("state/f.json", b"1")
    v2 = s.put("state/f.json", b"2", if_version=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        s.put("state/f.json", b"3", if_version=v1)
    with pytest.raises(PreconditionFailed):
        s.delete("state/f.json", if_version=v1)
    with pytest.raises(PreconditionFailed):
        s.put("state/missing.json", b"x", if_version=v1)
    assert s.get("state/f.json").data == b"2"


def test_one_of_eight_racing_creates_wins(az_container: str) -> None:
    s = store(az_container)
    wins: list[int] = []
    lost: list[int] = []

    def race(i: int) -> None:
        try:
            s.put("state/race.lock", str(i).encode(), if_absent=True)
            wins.append(i)
        except PreconditionFailed:
            lost.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(lost) == 7
    assert s.get("state/race.lock").data == str(wins[0]).encode()


def test_prefixes_isolate(az_container: str) -> None:
    store(az_container, "a").put("k", b"a")
    assert store(az_container, "b").list("") == []


def test_bad_url_names_the_key() -> None:
    with pytest.raises(ConfigError, match="az://account/container/prefix"):
        open_store("az://only-account")


def _http_error(status: int, code: str) -> HttpResponseError:
    err = HttpResponseError(message="m")
    err.status_code = status
    err.error_code = code
    return err


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ConditionNotMet", 412, PreconditionFailed),
        ("BlobAlreadyExists", 409, PreconditionFailed),
        ("BlobNotFound", 404, NotFound),
        ("ContainerNotFound", 404, StoreError),
        ("ServerBusy", 503, StoreUnavailable),
        ("AuthorizationFailure", 403, StoreError),
    ],
)
def test_error_table(code: str, status: int, expected: type) -> None:
    assert code in ERROR_CODES or expected in (StoreError, StoreUnavailable)
    got = map_error(_http_error(status, code), "k")
    assert type(got) is expected


def test_every_table_code_is_tested() -> None:
    assert set(ERROR_CODES) == {
        "ConditionNotMet",
        "BlobAlreadyExists",
        "BlobNotFound",
        "ContainerNotFound",
    }
