"""The NVSwitch fabric: each GPU's fabric state and health mask (NVML), the fabric manager's
service and its log; MIG mode; and findings that name their GPU."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pynvml as N
import pytest

from navarch.agent import run_once
from navarch.agent.fabric import FileFabricManager, decode_health_mask
from navarch.fleet.remedies import FaultClass, fault_class, row_for
from tests.support.agent import T0

#: Every health field present and false, configuration "none" (nvml.h bit layout).
HEALTHY_MASK = (
    N.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE
    << N.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
    | N.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE
    << N.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY
    | N.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE
    << N.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY
    | N.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE
    << N.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY
    | N.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE
    << N.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
)
WIDTH_BW = N.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW
DEGRADED_BW_MASK = (HEALTHY_MASK & ~WIDTH_BW) | N.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
COMPLETED = N.NVML_GPU_FABRIC_STATE_COMPLETED

#: gpud's sample fabricmanager.log lines (components/accelerator/nvidia/fabric-manager).
FM_FATAL = (
    "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 "
    "on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33"
)
FM_NON_FATAL = (
    "[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on "
    "fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61"
)


@pytest.fixture
def run(run: Callable[..., dict[str, Any]], tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """The agent tests' run on the NVML world; the fabric manager: the one given, else an
    active one on a machine whose sysfs lists no NVSwitch (never this test host's systemd)."""

    def go(fabric_manager: Any = None, now: datetime = T0, **kw: Any) -> dict[str, Any]:
        fm = fabric_manager or FileFabricManager(
            pci_root=str(tmp_path / "no-pci"),
            log_path=str(tmp_path / "none.log"),
            run=Systemctl("active"),
        )
        return run(now, fabric_manager=fm, **kw)

    return go


def found(report: dict[str, Any], name: str, gpu: int | None = None) -> list[dict[str, Any]]:
    return [
        c for c in report["checks"] if c["name"] == name and (gpu is None or c["gpu_index"] == gpu)
    ]


def test_a_completed_fabric_with_every_health_field_false_is_healthy(
    run: Any, nvml_world: Any, validate_report: Any
) -> None:
    nvml_world.set("fabric", 0, (COMPLETED, 0, HEALTHY_MASK))
    report = run()
    validate_report(report)
    (c,) = found(report, "fabric", 0)
    assert (c["status"], c["fault_key"]) == ("healthy", None)
    assert c["evidence"]["health"] == {
        "degraded_bw": "false",
        "route_recovery": "false",
        "route_unhealthy": "false",
        "access_timeout_recovery": "false",
        "incorrect_configuration": "none",
    }
    assert report["status"] == "healthy"


def test_degraded_bandwidth_in_the_health_mask_is_an_unhealthy_fabric_fault(
    run: Any, nvml_world: Any, validate_report: Any
) -> None:
    nvml_world.set("fabric", 1, (COMPLETED, 0, DEGRADED_BW_MASK))
    report = run()
    validate_report(report)
    (c,) = found(report, "fabric", 1)
    assert (c["status"], c["action"]) == ("unhealthy", "reboot")
    assert c["fault_key"] == {"kind": "fabric_degraded_bw", "gpu_index": 1}
    assert "bandwidth degraded" in c["message"]
    assert fault_class("fabric_degraded_bw") is FaultClass.FABRIC
    row = row_for((), "fabric_degraded_bw")
    assert row is not None and row.match == "fabric"


def test_fabric_state_not_supported_reads_not_supported_and_never_unhealthy(
    run: Any, nvml_world: Any
) -> None:
    report = run()  # the world's default: no NVSwitch fabric
    for gpu in (0, 1):
        (c,) = found(report, "fabric", gpu)
        assert c["status"] == "healthy" and c["fault_key"] is None
        assert "not supported" in c["message"]
    assert report["status"] == "healthy"


def test_a_registration_still_in_progress_is_unhealthy(run: Any, nvml_world: Any) -> None:
    nvml_world.set("fabric", 0, (N.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 0, 0))
    (c,) = found(run(), "fabric", 0)
    assert (c["status"], c["fault_key"]["kind"]) == ("unhealthy", "fabric_state")


def test_route_recovery_in_progress_is_degraded_without_action() -> None:
    mask = HEALTHY_MASK & ~(0x3 << 2) | (1 << 2)
    assert decode_health_mask(mask)["route_recovery"] == "true"
    from navarch.agent.fabric import fabric_rule
    from navarch.agent.gpu import FabricInfo, FakeGpuBackend

    g = FakeGpuBackend("n", 1).probe().gpus[0]
    import dataclasses

    (c,) = fabric_rule(dataclasses.replace(g, fabric=FabricInfo(COMPLETED, 0, mask)), None)
    assert (c.status.value, c.action.value, c.fault_kind) == (
        "degraded",
        "none",
        "fabric_route_recovery",
    )


def test_an_incorrect_configuration_names_its_reason() -> None:
    mask = HEALTHY_MASK & ~(0xF << 8) | (
        N.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS << 8
    )
    assert decode_health_mask(mask)["incorrect_configuration"] == "insufficient_nvlinks"


# --- the fabric manager ------------------------------------------------------------------


class Systemctl:
    """A systemctl that answers ``show`` with one ActiveState and records its calls."""

    def __init__(self, state: str, load: str = "loaded") -> None:
        self.state, self.load = state, load
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout_s: float) -> tuple[int, str]:
        self.calls.append(argv)
        return 0, f"LoadState={self.load}\nActiveState={self.state}\n"


def pci_tree(root: Path, nvswitches: int) -> str:
    """A /sys/bus/pci/devices with one GPU (3D controller) and `nvswitches` NVSwitches
    (bridge class 0x068000, as lspci shows an HGX board's NVSwitches)."""
    devices = [("0000:18:00.0", "0x030200")] + [
        (f"0000:{0x86 + n:02x}:00.0", "0x068000") for n in range(nvswitches)
    ]
    for bdf, klass in devices:
        d = root / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x10de\n")
        (d / "class").write_text(klass + "\n")
    return str(root)


def test_an_inactive_fabric_manager_on_an_nvswitch_machine_is_a_fabric_fault(
    run: Any, tmp_path: Path, validate_report: Any
) -> None:
    systemctl = Systemctl("inactive")
    fm = FileFabricManager(pci_root=pci_tree(tmp_path / "pci", 4), run=systemctl)
    report = run(fabric_manager=fm)
    validate_report(report)
    (c,) = found(report, "fabric_manager")
    assert (c["status"], c["action"]) == ("unhealthy", "reboot")
    assert c["fault_key"] == {"kind": "fabric_manager_inactive", "gpu_index": None}
    assert c["evidence"]["nvswitches"] == 4
    assert fault_class("fabric_manager_inactive") is FaultClass.FABRIC
    assert systemctl.calls[0][:2] == ["systemctl", "show"]


def test_an_active_fabric_manager_is_healthy_and_a_machine_without_nvswitch_is_not_asked(
    run: Any, tmp_path: Path
) -> None:
    active = Systemctl("active")
    report = run(fabric_manager=FileFabricManager(pci_root=pci_tree(tmp_path / "a", 4), run=active))
    assert [c["status"] for c in found(report, "fabric_manager")] == ["healthy"]
    nobody = Systemctl("inactive")
    report = run(fabric_manager=FileFabricManager(pci_root=pci_tree(tmp_path / "b", 0), run=nobody))
    assert found(report, "fabric_manager") == [] and nobody.calls == []


def test_a_fatal_nvswitch_line_of_this_boot_in_the_fabric_manager_log_is_a_fault(
    run: Any, tmp_path: Path
) -> None:
    log = tmp_path / "fabricmanager.log"
    old = FM_FATAL.replace("Jul 23 2024", "Jul 01 2024")  # before this boot: not counted
    log.write_text(
        f"{old}\n[Jul 23 2024 07:50:00] [INFO] [tid 841] started\n{FM_FATAL}\n{FM_NON_FATAL}\n"
    )
    fm = FileFabricManager(
        pci_root=pci_tree(tmp_path / "pci", 4),
        log_path=str(log),
        run=Systemctl("active"),
        boot_time=datetime(2024, 7, 9, 0, 0),
    )
    kinds = {
        c["fault_key"]["kind"]: (c["status"], c["evidence"]["lines"])
        for c in found(run(fabric_manager=fm), "fabric_manager")
        if c["fault_key"]
    }
    assert kinds == {
        "fabric_manager:nvswitch_fatal": ("unhealthy", 1),
        "fabric_manager:nvswitch_non_fatal": ("degraded", 1),
    }


# --- MIG and the GPU's identity -----------------------------------------------------------


def test_mig_mode_says_which_readings_do_not_apply_instead_of_failing(
    run: Any, nvml_world: Any
) -> None:
    nvml_world.set("mig", 0, [N.NVML_DEVICE_MIG_ENABLE, N.NVML_DEVICE_MIG_ENABLE])
    nvml_world.set("util", 0, N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED))
    nvml_world.set("procs", 0, N.NVMLError(N.NVML_ERROR_NO_PERMISSION))
    report = run()
    (mig,) = found(report, "mig", 0)
    assert mig["status"] == "healthy"
    assert mig["evidence"]["not_applicable"] == ["utilization_pct", "process_count"]
    assert "not applicable" in mig["message"]
    assert [c["status"] for c in found(report, "readings", 0)] == ["healthy"]
    assert report["gpus"][0]["mig_mode"] is True and report["status"] == "healthy"


def test_a_pending_mig_change_is_degraded_and_not_a_hardware_fault(
    run: Any, nvml_world: Any
) -> None:
    nvml_world.set("mig", 1, [N.NVML_DEVICE_MIG_DISABLE, N.NVML_DEVICE_MIG_ENABLE])
    (mig,) = found(run(), "mig", 1)
    assert (mig["status"], mig["action"]) == ("degraded", "none")


def test_a_finding_names_its_gpu_by_pci_bus_id_and_serial(run: Any, nvml_world: Any) -> None:
    nvml_world.set("fabric", 1, (COMPLETED, 0, DEGRADED_BW_MASK))
    report = run()
    (c,) = found(report, "fabric", 1)
    assert c["gpu"] == {
        "pci_bus_id": "0000:28:00",
        "serial": "1650000000001",
        "uuid": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",
    }
    assert report["gpus"][1]["serial"] == "1650000000001"
    assert all("gpu" not in c for c in report["checks"] if c["status"] == "healthy")


def test_the_fake_backend_injects_a_degraded_fabric_and_a_hung_gpu(
    make_config: Callable[..., Any], tmp_path: Path, validate_report: Any
) -> None:
    (tmp_path / "faults.json").write_text('{"fabric_degraded": [2], "gpu_hung": 4}')
    report = run_once(make_config(), now=T0, to_stdout=True)
    validate_report(report)
    kinds = {(c["fault_key"]["kind"], c["gpu_index"]) for c in report["checks"] if c["fault_key"]}
    assert kinds == {("fabric_degraded_bw", 2), ("gpu_hung", 4)}
    assert [g["index"] for g in report["gpus"]] == [0, 1, 2, 3]


def test_an_nvlink_error_finding_names_the_link_whose_counters_rose(
    run: Any, nvml_world: Any
) -> None:
    nvml_world.nvlink_counters[(0, N.NVML_NVLINK_ERROR_DL_REPLAY)] = 2  # the world's link 0
    run()  # the baseline
    nvml_world.nvlink_counters[(0, N.NVML_NVLINK_ERROR_DL_REPLAY)] = 5
    (c,) = found(run(now=T0 + timedelta(seconds=60)), "nvlink_errors", 0)
    assert c["status"] == "unhealthy"
    assert c["evidence"]["links"] == {"0": {"replay": 5}}
