"""A pool's retirement settings in the state document: kept across runs, versioned, and
an older state without them loads as "unknown" (retired as scheduler none with the
schema's defaults)."""

from __future__ import annotations

from datetime import UTC, datetime

from navarch.fleet.durations import parse_duration_s
from navarch.fleet.schemas import load_schema
from navarch.fleet.spec import Scheduler
from navarch.planner.model import Memory, PoolMemory, PoolSettings
from navarch.planner.retired import UNKNOWN, retired_pool
from navarch.reconcile.codec import memory_from_json, memory_to_json

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SLURM = PoolSettings(
    scheduler=Scheduler.SLURM,
    playbooks=(("drain", "playbooks/drain.yaml"),),
    ssh=(("head_node", "slurm-head"), ("port", 2222), ("strict_host_keys", False)),
    drain_timeout_s=2700,
    stale_after_s=300,
    max_unavailable=2,
)


def test_pool_settings_and_retirement_survive_the_state_document() -> None:
    memory = Memory(fleet="demo").with_pool(
        PoolMemory("infer", next_index=4, settings=SLURM, retiring_since=NOW)
    )
    doc = memory_to_json(memory)
    assert doc["pools"]["infer"]["settings"]["version"] == 1
    loaded = memory_from_json(doc)
    assert loaded.pool("infer").settings == SLURM
    assert loaded.pool("infer").retiring_since == NOW


def test_state_without_pool_settings_loads_as_unknown_and_retires_as_scheduler_none() -> None:
    older = {"version": 1, "fleet": "demo", "pools": {"infer": {"next_index": 3}}}
    pm = memory_from_json(older).pool("infer")
    assert pm.settings is None and pm.retiring_since is None
    pool = retired_pool("infer", pm.settings)
    assert (pool.scheduler, dict(pool.playbooks), pool.health.drain_timeout_s) == ("none", {}, 1800)


def test_settings_record_of_another_version_is_unknown() -> None:
    doc = memory_to_json(Memory(fleet="demo").with_pool(PoolMemory("infer", settings=SLURM)))
    doc["pools"]["infer"]["settings"]["version"] = 2
    assert memory_from_json(doc).pool("infer").settings is None


def test_unknown_settings_are_the_fleet_schema_defaults() -> None:
    defs = load_schema("fleet.schema.json")["$defs"]
    health = defs["health"]["properties"]
    scheduler = defs["pool"]["properties"]["scheduler"]["default"]
    assert UNKNOWN.scheduler == scheduler
    assert UNKNOWN.drain_timeout_s == parse_duration_s(health["drain_timeout"]["default"])
    assert UNKNOWN.stale_after_s == parse_duration_s(health["stale_after"]["default"])
    assert UNKNOWN.max_unavailable == health["max_unavailable"]["default"]
