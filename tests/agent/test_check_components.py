"""The per-GPU check table: every component is a named, documented, pure unit, and the
table is the extension point (a third-party component is one more entry)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from navarch.agent.checks import Check, CounterSample
from navarch.agent.gpu import FabricInfo, FakeGpuBackend, GpuSnapshot
from navarch.agent.gpu_checks import GPU_CHECKS, GPU_LOST, Baselines, GpuCheck, gpu_checks
from navarch.report.health import Remedy as Action
from navarch.report.health import Status

SNAPSHOT_FIELDS = {f.name for f in dataclasses.fields(GpuSnapshot)}
GPU = FakeGpuBackend("train-0001", 1).probe().gpus[0]
NOW_S = 1_772_366_400.0


def run(g: GpuSnapshot, components: tuple[GpuCheck, ...] = GPU_CHECKS) -> list[Check]:
    return gpu_checks(
        g, baselines={}, slowdown_history=(), now_s=NOW_S, boot_id="b", components=components
    )


def test_table_names_readings_and_sources() -> None:
    names = [c.name for c in GPU_CHECKS]
    assert names == [
        "readings",
        "temperature",
        "power",
        "recovery_action",
        "remapped_rows",
        "retired_pages",
        "ecc",
        "ecc_mode",
        "clock_events",
        "pcie_link",
        "pcie_replay",
        "nvlink",
        "fabric",
        "mig",
        "persistence_mode",
        "inforom",
    ]
    for c in (GPU_LOST, *GPU_CHECKS):
        assert isinstance(c, GpuCheck)
        assert c.readings and set(c.readings) <= SNAPSHOT_FIELDS, c.name
        source = getattr(c, "source", "")
        assert "Source:" in source, f"{c.name} documents no source"


def test_each_component_only_names_its_own_checks() -> None:
    hot = dataclasses.replace(
        GPU,
        temperature_c=95.0,
        power_limit_w=300.0,
        recovery_action=2,
        remapped_rows_failure=True,
        retired_pages_sbe=70,
        retired_pages_dbe=0,
        ecc_uncorrected_volatile=1,
        ecc_mode_current=False,
        clock_event_reasons=0x40,
        pcie_link_width=4,
        pcie_replay_count=10_000,
        nvlink_active=(False,) * 18,
        persistence_mode=False,
        inforom_valid=False,
        fabric=FabricInfo(state=3, status=0, health_mask=0x1),
        mig_current=True,
        mig_pending=False,
    )
    b = Baselines({"pcie_replay": CounterSample(0, NOW_S - 60, "b")}, (), NOW_S, "b")
    for c in GPU_CHECKS:
        found = c.evaluate(hot, b)
        assert found, c.name
        assert all(x.gpu_index == hot.index for x in found)
        assert {x.name for x in found} <= {c.name, f"{c.name}_errors"}, c.name
        assert c.evaluate(hot, b) == found  # pure: same inputs, same checks


def test_lost_gpu_runs_only_the_gate() -> None:
    lost = dataclasses.replace(GPU, lost=True)
    assert [(c.name, c.status, c.action) for c in run(lost)] == [
        ("gpu_lost", Status.UNHEALTHY, Action.REBOOT)
    ]
    assert GPU_LOST.evaluate(GPU, Baselines({}, (), NOW_S, "b")) == []


def test_baselines_from_another_boot_give_no_rate() -> None:
    b = Baselines({"pcie_replay": CounterSample(0, NOW_S - 60, "old-boot")}, (), NOW_S, "b")
    assert b.rate_per_s("pcie_replay", 1000) is None and b.delta("pcie_replay", 1000) is None
    same = Baselines({"pcie_replay": CounterSample(0, NOW_S - 60, "b")}, (), NOW_S, "b")
    assert same.rate_per_s("pcie_replay", 600) == 10.0 and same.delta("pcie_replay", 600) == 600


@dataclass(frozen=True)
class FanCheck:
    """A third-party component: any object with name, readings and evaluate.

    Source: this test.
    """

    name: str = "fan"
    readings: tuple[str, ...] = ("temperature_c",)

    def evaluate(self, gpu: GpuSnapshot, baselines: Baselines) -> list[Check]:
        return [Check("fan", Status.DEGRADED, Action.NONE, "fan slow", gpu.index, {})]


def test_a_third_party_component_joins_the_table() -> None:
    plain = run(GPU)
    extended = run(GPU, (*GPU_CHECKS, FanCheck()))
    assert extended[:-1] == plain
    assert (extended[-1].name, extended[-1].status) == ("fan", Status.DEGRADED)
    assert isinstance(FanCheck(), GpuCheck)
