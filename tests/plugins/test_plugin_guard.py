"""The guard around plugins, in process: discovery through a real dist-info on sys.path,
a store plugin chosen by URL scheme, wrong shapes and stray exceptions named by plugin."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.errors import CapacityError, PluginError, ProviderError
from navarch.inventory import Instance, InstanceState
from navarch.plugins import Group, PluginRef, names
from navarch.providers.base import ProvisionRequest
from navarch.providers.plugin import CheckedProvider
from navarch.stores import open_store
from tests.plugins.conftest import fake_distribution

MEMSTORE = """
from navarch.stores.file import FileStore

def open_mem(url):
    return FileStore(url.split("://", 1)[1])
"""


def test_store_plugin_by_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = fake_distribution(
        tmp_path / "site",
        "navarch-memstore",
        "[navarch.stores]\nmem = navarch_memstore:open_mem\n",
        {"navarch_memstore": MEMSTORE},
    )
    monkeypatch.syspath_prepend(str(site))
    assert "mem" in names(Group.STORES)
    store = open_store(f"mem://{tmp_path / 'data'}")
    version = store.put("k", b"v", if_absent=True)
    blob = store.get("k")
    assert (blob.data, blob.version) == (b"v", version)


REF = PluginRef(group="navarch.providers", name="odd", value="odd:create", dist="odd 0.1")
REQUEST = ProvisionRequest(
    fleet="f",
    pool="p",
    node="n",
    zone="z",
    instance_type="t",
    spot=False,
    launch_id="l",
    attempt=0,
    tags={},
)


class Odd:
    name = "odd"

    def list_instances(self, fleet: str) -> object:
        return [{"id": "not an Instance"}]

    def provision(self, request: ProvisionRequest) -> object:
        return {"id": "i-1"}

    def terminate(self, instances: object) -> None:
        raise KeyError("boom")

    def reboot(self, instances: object) -> None:
        raise CapacityError("no room", code="X", scope="zone")

    def update_tags(self, instance: object, tags: object) -> None:
        return None


def test_wrong_shapes_and_stray_exceptions_name_the_plugin() -> None:
    p = CheckedProvider(REF, Odd())
    for act in (
        lambda: p.list_instances("f"),
        lambda: p.provision(REQUEST),
        lambda: p.terminate([]),
    ):
        with pytest.raises(PluginError) as err:
            act()
        assert "plugin 'odd' (navarch.providers = odd:create from odd 0.1)" in str(err.value)
        assert "\n" not in str(err.value)
    # The contract's own errors pass through unchanged (capacity still falls over).
    with pytest.raises(CapacityError):
        p.reboot([])


def test_a_good_provider_passes_through() -> None:
    inst = Instance(
        provider="odd",
        instance_id="i-1",
        zone="z",
        instance_type="t",
        state=InstanceState.RUNNING,
        launched_at=datetime.now(UTC),
    )

    class Good(Odd):
        def list_instances(self, fleet: str) -> object:
            return [inst]

        def provision(self, request: ProvisionRequest) -> object:
            return inst

    p = CheckedProvider(REF, Good())
    assert p.list_instances("f") == (inst,) and p.provision(REQUEST) is inst


def test_a_plugin_provider_never_receives_an_ownership_tag_write() -> None:
    inst = Instance(
        provider="odd",
        instance_id="i-1",
        zone="z",
        instance_type="t",
        state=InstanceState.RUNNING,
        launched_at=datetime.now(UTC),
        tags=(("navarch-fleet", "f"),),
    )
    written: list[object] = []

    class Obliging(Odd):
        def update_tags(self, instance: object, tags: object) -> None:
            written.append(tags)

    p = CheckedProvider(REF, Obliging())
    with pytest.raises(ProviderError) as info:
        p.update_tags(inst, {"navarch-fleet": "prod"})
    assert info.value.code == "OwnershipTag" and written == []
    p.update_tags(inst, {"team": "x"})
    assert written == [{"team": "x"}]
