"""The local provider's simulated hosts at fleet scale: a run's launches land where the
placement rule says (pick_host below, the rule's plain statement: a scan of the rack), each slot of a rack is looked at a bounded number of times (not a
scan of the whole rack per launch), and a terminated machine's host is handed out again."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection
from pathlib import Path

import pytest

from navarch.providers.base import ProvisionRequest
from navarch.providers.local import LocalProvider, racks
from navarch.providers.local.racks import RACKS, HostBook, host_name, rack_name

ZONE = "local-a"


def pick_host(
    zone: str,
    launch_id: str,
    occupied: Collection[str],
    avoid: Collection[str] = (),
    block: str = "",
) -> tuple[str, tuple[str, ...]]:
    """The placement rule written plainly, as the oracle HostBook must agree with: the rack
    `block` names in this zone, else the launch id's hash; its lowest slot neither occupied
    nor avoided."""
    by_name = {f"{zone}/{rack_name(i)}": i for i in range(RACKS)}
    rack = by_name.get(block)
    if rack is None:
        rack = int(hashlib.sha256(launch_id.encode()).hexdigest()[:8], 16) % RACKS
    slot = 0
    while (h := host_name(zone, rack, slot)) in occupied or h in avoid:
        slot += 1
    return h, (zone, rack_name(rack), h)


def _request(i: int) -> ProvisionRequest:
    return ProvisionRequest(
        fleet="demo",
        pool="train",
        node=f"demo-train-{i:04d}",
        zone=ZONE,
        instance_type="sim-h100x8",
        spot=False,
        launch_id=f"launch-{i}",
        attempt=1,
        tags={"navarch-fleet": "demo", "navarch-pool": "train", "navarch-node": f"n{i}"},
    )


def test_host_book_takes_the_host_pick_host_picks_through_launches_and_frees() -> None:
    rng = random.Random(7)
    book, taken = HostBook({"odd-host", f"{ZONE}-r1-h00"}), {"odd-host", f"{ZONE}-r1-h00"}
    for i in range(600):
        if taken and rng.random() < 0.3:
            gone = rng.choice(sorted(taken))
            book.discard(gone)
            taken.discard(gone)
            continue
        avoid = {f"{ZONE}-r{rng.randrange(4)}-h{rng.randrange(30):02d}" for _ in range(3)}
        block = rng.choice(["", f"{ZONE}/rack-2", "elsewhere/rack-1"])
        want = pick_host(ZONE, f"l{i}", taken, avoid, block)
        assert book.take(ZONE, f"l{i}", avoid, block) == want
        taken.add(want[0])
    assert all(h in book for h in taken)


def test_a_run_of_launches_looks_at_each_rack_slot_a_bounded_number_of_times_and_reuses_freed_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[int] = []
    name = racks.host_name

    def counted(zone: str, rack: int, slot: int) -> str:
        looked.append(slot)
        return name(zone, rack, slot)

    monkeypatch.setattr(racks, "host_name", counted)
    provider = LocalProvider("sim", tmp_path / "local" / "demo", fleet="demo")
    launches = 400
    launched = [provider.provision(_request(i)) for i in range(launches)]
    assert len({m.host_id for m in launched}) == launches
    # A scan of the rack per launch looks about launches^2 / 8 times (20,000 here).
    assert len(looked) <= 4 * launches
    gone = launched[5]  # its host, low in its rack, is the next one that rack hands out
    provider.terminate([gone])
    again = next(
        i
        for i in range(launches, 10 * launches)
        if pick_host(ZONE, f"launch-{i}", ())[1][1] == gone.topology[1]
    )
    assert provider.provision(_request(again)).host_id == gone.host_id


def test_a_launch_after_a_listing_reads_no_machine_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = LocalProvider("sim", tmp_path / "local" / "demo", fleet="demo")
    first = provider.provision(_request(0))
    listing = LocalProvider("sim", tmp_path / "local" / "demo", fleet="demo")
    assert [i.host_id for i in listing.list_instances("demo")] == [first.host_id]
    reads: list[str] = []
    monkeypatch.setattr(listing, "machines", lambda: reads.append("all") or [])
    again = next(  # a launch into the listed machine's rack: its host is taken
        i for i in range(1, 100) if pick_host(ZONE, f"launch-{i}", ())[1] == first.topology
    )
    assert listing.provision(_request(again)).host_id != first.host_id
    assert reads == []
