"""A GPU whose driver hangs: the agent's report names gpu_hung, and the next plan cordons the
node at once; it is never held as silent (unknown, stale or offline)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import builders
import pynvml
import pytest

from navarch.agent import run_once
from navarch.agent.nvml import NvmlGpuBackend
from navarch.fleet.remedies import FaultClass, fault_class, row_for
from navarch.planner.context import PlanOptions
from navarch.planner.model import Lifecycle
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.reconcile.reports import summarize
from navarch.report.health import Remedy
from tests.support.agent import agent_config

FLEET = "rt"
NODE = f"{FLEET}-train-0001"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def never() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()


def hung_nvml(never: threading.Event) -> Any:
    """One GPU whose first reading after its identity (the serial) never returns."""

    class Pci:
        busId = b"00000000:18:00.0"

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "570.133.20",
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetPciInfo_v3=lambda h: Pci(),
        nvmlDeviceGetSerial=lambda h: never.wait(),
    )


def agent_report(tmp_path: Path, never: threading.Event) -> dict[str, Any]:
    cfg = agent_config(
        tmp_path,
        fleet=FLEET,
        node=NODE,
        gpus_per_node=1,
        fake_gpu=False,
        faults_file=None,
        instance_id=None,
        boot_id="boot-1",
        nvml_call_timeout_s=0.2,
    )
    backend = NvmlGpuBackend(hung_nvml(never), call_timeout_s=0.2)
    return run_once(cfg, now=NOW - timedelta(seconds=10), to_stdout=True, backend=backend)


def test_a_hung_gpu_report_is_cordoned_by_the_next_plan_and_never_held_as_silent(
    tmp_path: Path, never: threading.Event
) -> None:
    report = agent_report(tmp_path, never)
    summary = summarize(report)
    assert summary.fault_key is not None and summary.fault_key.kind == "gpu_hung"
    assert summary.fatal  # acts at once, as a fatal XID does

    pool = builders.pool_doc(target=3, max_nodes=4, zones=("z1",))
    spec = builders.fleet_from_dict(builders.fleet_doc(FLEET, {"train": pool}))
    names = [f"{FLEET}-train-{i:04d}" for i in (1, 2, 3)]
    inventory = [
        builders.instance(FLEET, "train", n, launched_at=NOW - timedelta(days=1)) for n in names
    ]
    reports = {NODE: builders.observation(NODE, "train", summary)}
    for i, n in enumerate(names[1:]):
        reports[n] = builders.observation(
            n, "train", builders.summary(sequence=20 + i, generated_at=NOW - timedelta(seconds=10))
        )
    memory = builders.memory(FLEET, [], [builders.pool_memory("train", next_index=4)])
    observed = observe(spec, inventory, reports, memory, NOW, {NODE: True})
    view = next(v for v in observed.views if v.node == NODE)
    assert view.lifecycle is Lifecycle.UNHEALTHY and view.immediate
    assert view.lifecycle not in (Lifecycle.UNKNOWN, Lifecycle.STALE, Lifecycle.OFFLINE)
    p = plan(spec, observed.views, observed.memory, NOW, PlanOptions())
    assert [a.kind.value for a in p.actions if a.node == NODE][:1] == ["cordon"]


def test_gpu_hung_has_its_own_remediation_row_reboot_then_replace() -> None:
    assert fault_class("gpu_hung") is FaultClass.GPU_HUNG
    row = row_for((), "gpu_hung")
    assert row is not None and row.match == "gpu_hung"
    assert row.actions == (Remedy.REBOOT, Remedy.REPLACE)
