"""`navarch local inject --fault CLASS`: each class's representative fault reaches the
node's agent and comes out of its report as a fault of that class."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.errors import ConfigError
from navarch.fleet.remedies import FaultClass, fault_class
from navarch.providers.local.faults import INJECTABLE, InjectableFault, deliver, injectable

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: The classes the fake backend's own readings do not reach (XIDs, lost GPUs, ECC and
#: temperatures do): each needs a row.
NEW_CLASSES = {
    FaultClass.NETWORK,
    FaultClass.FABRIC,
    FaultClass.HOST_CPU,
    FaultClass.HOST_MEMORY,
    FaultClass.HOST_STORAGE,
    FaultClass.PCIE,
    FaultClass.CLOCK,
    FaultClass.GPU_HUNG,
}


def test_every_new_fault_class_has_one_injectable_kind_of_that_class() -> None:
    assert {r.fault_class for r in INJECTABLE} == NEW_CLASSES
    assert len(INJECTABLE) == len(NEW_CLASSES)
    assert all(fault_class(r.kind) is r.fault_class for r in INJECTABLE)


@pytest.mark.parametrize("row", INJECTABLE, ids=lambda r: r.fault_class.value)
def test_an_injected_class_is_reported_as_a_fault_of_that_class(
    row: InjectableFault, make_config: Callable[..., AgentConfig]
) -> None:
    cfg = make_config()
    faults: dict[str, Any] = {}
    deliver(injectable(row.fault_class.value), Path(str(cfg.kernel_log)), faults, gpu=2)
    Path(str(cfg.faults_file)).write_text(json.dumps(faults))
    report = run_once(cfg, now=T0)
    found = [c for c in report["checks"] if c["fault_key"]]
    assert [c["fault_key"]["kind"] for c in found] == [row.kind]
    assert fault_class(found[0]["fault_key"]["kind"]) is row.fault_class
    assert found[0]["status"] == "unhealthy"
    assert found[0]["gpu_index"] == (2 if row.per_gpu else None)


def test_a_named_kind_injects_the_same_row_as_its_class() -> None:
    assert injectable("ib_link_flap") == injectable("network")


def test_an_unknown_fault_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        injectable("cosmic_ray")
    assert "--fault" in str(err.value) and "network (ib_link_flap)" in str(err.value)
