"""GCSStore through the real google-cloud-storage client: what is GCS's own.

The ObjectStore contract itself runs in tests/contracts/test_store_contract.py against
fake-gcs-server. fake-gcs-server does not honour preconditions on DELETE (a documented
gap of the fake, marked there), so conditional delete is tested here against a minimal
stub speaking the GCS JSON API's DELETE with ifGenerationMatch.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import unquote

import pytest
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from navarch.errors import NotFound, PreconditionFailed, StoreError, StoreUnavailable
from navarch.stores import open_store
from navarch.stores.gcs import BUCKET_METADATA_SWITCH, GCSStore, map_error
from tests.support.fakehttp import Answer, FakeAPI, Request, Route, serve
from tests.support.gcs_log import GcsLog, recording_proxy


@pytest.fixture
def store(gcs_bucket: str) -> GCSStore:
    return GCSStore.from_url(f"gs://{gcs_bucket}/fleets/prod")


def test_open_store_by_url(gcs_bucket: str) -> None:
    s = open_store(f"gs://{gcs_bucket}/p")
    assert isinstance(s, GCSStore)
    assert s.url == f"gs://{gcs_bucket}/p"
    assert GCSStore.from_url(f"gs://{gcs_bucket}").prefix == ""


def test_version_is_the_generation(store: GCSStore) -> None:
    v = store.put("state/f.json", b'{"serial": 1}')
    assert int(v) > 0
    assert store.list("state/")[0].version == v


def test_list_on_missing_bucket_is_store_error(gcs_env: str) -> None:
    with pytest.raises(StoreError) as info:
        GCSStore.from_url("gs://no-such-bucket-navarch/p").list("")
    assert not isinstance(info.value, NotFound)


def test_object_calls_make_no_bucket_request(
    gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client library would probe the bucket's metadata on a thread of its own
    # (storage.buckets.get, outside the reconciler's role); navarch switches it off.
    monkeypatch.delenv(BUCKET_METADATA_SWITCH, raising=False)
    log = GcsLog()
    with recording_proxy(os.environ["STORAGE_EMULATOR_HOST"], log) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy)
        store = GCSStore.from_url(f"gs://{gcs_bucket}/p")
        version = store.put("state/f.json", b"{}")
        assert store.get("state/f.json").version == version
        assert [i.key for i in store.list("state/")] == ["state/f.json"]
        store.delete("state/f.json")
        for t in threading.enumerate():  # a probe, had one started, is recorded by now
            if "_fetch_background" in t.name:
                t.join()
    assert log.permissions() == {
        "storage.objects.create",
        "storage.objects.get",
        "storage.objects.list",
        "storage.objects.delete",
    }


def test_an_operators_bucket_metadata_setting_is_kept(
    gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUCKET_METADATA_SWITCH, "false")
    GCSStore.from_url(f"gs://{gcs_bucket}/p")
    assert os.environ[BUCKET_METADATA_SWITCH] == "false"


# -- conditional delete against a GCS JSON API stub -----------------------------------------


class _DeleteStub(FakeAPI):
    """DELETE /storage/v1/b/<bucket>/o/<name>?ifGenerationMatch=N; object p/lock at gen 7."""

    def error_body(self, status: int, code: str, message: str) -> Any:
        return {"error": {"code": status, "message": message, "errors": [{"reason": code}]}}

    def call_data(self, request: Request) -> Any:
        return request.query

    def _delete(self, req: Request, m: re.Match[str]) -> Answer:
        if unquote(m["name"]) != "p/lock":
            return self.error(404, "notFound", "stub")
        if req.query.get("ifGenerationMatch", ["7"])[0] != "7":
            return self.error(412, "conditionNotMet", "stub")
        return 204, None

    ROUTES: ClassVar[tuple[Route, ...]] = (
        Route("DELETE", r"/storage/v1/b/[^/]+/o/(?P<name>.+)", _delete),
    )


@pytest.fixture
def delete_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[_DeleteStub]:
    stub = _DeleteStub()
    with serve(stub) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        yield stub


def test_conditional_delete_maps_412(delete_stub: _DeleteStub) -> None:
    s = GCSStore.from_url("gs://b/p")
    with pytest.raises(PreconditionFailed):
        s.delete("lock", if_version="6")
    deletes = [c.data for c in delete_stub.calls if c.method == "DELETE"]
    assert deletes[-1]["ifGenerationMatch"] == ["6"]
    s.delete("lock", if_version="7")
    with pytest.raises(NotFound):
        s.delete("gone", if_version="7")


# -- the one error boundary ------------------------------------------------------------------

# Every upstream error GCSStore relies on, and what it becomes.
ERROR_TABLE = [
    (gexc.PreconditionFailed("x"), "put", PreconditionFailed),
    (gexc.Conflict("x"), "put", PreconditionFailed),
    (gexc.NotFound("x"), "get", NotFound),
    (gexc.NotFound("x"), "delete", NotFound),
    (gexc.NotFound("x"), "list", StoreError),
    (gexc.Forbidden("x"), "get", StoreError),
    (gexc.Unauthorized("x"), "put", StoreError),
    (auth_exc.DefaultCredentialsError("x"), "open", StoreError),
    (gexc.ServiceUnavailable("x"), "put", StoreUnavailable),
    (gexc.TooManyRequests("x"), "put", StoreUnavailable),
    (ConnectionError("x"), "get", StoreUnavailable),
]


@pytest.mark.parametrize(("exc", "op", "expected"), ERROR_TABLE)
def test_map_error(exc: BaseException, op: str, expected: type) -> None:
    mapped = map_error(exc, "k", op=op)
    assert type(mapped) is expected
