"""NVML backend: every check through patched pynvml functions, plus real nvmlInit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pynvml
import pytest

from navarch.agent import run_once
from navarch.agent.gpu import ProbeErrorKind
from navarch.agent.nvml import NvmlGpuBackend, classify_nvml_error
from tests.support.agent import T0


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def checks(report: dict[str, Any], name: str, gpu: int | None = None) -> list[dict[str, Any]]:
    return [
        c for c in report["checks"] if c["name"] == name and (gpu is None or c["gpu_index"] == gpu)
    ]


def the(report: dict[str, Any], name: str, gpu: int | None = None) -> dict[str, Any]:
    found = checks(report, name, gpu)
    assert len(found) == 1, (name, gpu, report["checks"])
    return found[0]


def test_healthy_node(run: Any, validate_report: Any) -> None:
    report = run()
    validate_report(report)
    assert (report["status"], report["action"], report["health_score"]) == ("healthy", "none", 100)
    assert [g["pci_bus_id"] for g in report["gpus"]] == ["0000:18:00", "0000:28:00"]
    g = report["gpus"][0]
    assert g["temperature_c"] == 41 and g["power_w"] == 95.0 and g["process_count"] == 0
    assert g["utilization_pct"] == 40.0 and g["memory_total_bytes"] == 81559 * 1024 * 1024
    assert the(report, "nvml")["evidence"]["driver_version"] == "570.133.20"


@pytest.mark.parametrize(
    ("code", "status", "action"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "unknown", "none"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "unknown", "none"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "unhealthy", "reboot"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "unhealthy", "reboot"),
        # A transient error is tolerated at first (test_transient_nvml_errors.py).
        (pynvml.NVML_ERROR_UNKNOWN, "healthy", "none"),
    ],
)
def test_init_errors(
    run: Any, nvml_world: Any, validate_report: Any, code: int, status: str, action: str
) -> None:
    nvml_world.init_error = err(code)
    report = run()
    validate_report(report)
    c = the(report, "nvml")
    assert (c["status"], c["action"]) == (status, action)
    assert (report["status"], report["action"]) == (status, action)
    assert report["gpus"] == []


def test_device_count_below_expected(run: Any, validate_report: Any) -> None:
    report = run(gpus_per_node=8)
    validate_report(report)
    c = the(report, "gpu_count")
    assert (c["status"], c["action"], c["evidence"]) == (
        "unhealthy",
        "reboot",
        {"found": 2, "expected": 8},
    )


def test_unreadable_handle(run: Any, nvml_world: Any) -> None:
    nvml_world.handle_errors[1] = err(pynvml.NVML_ERROR_UNKNOWN)
    report = run()
    c = the(report, "gpu_handle", 1)
    assert (c["status"], c["action"]) == ("unhealthy", "reboot")
    assert len(report["gpus"]) == 1


@pytest.mark.parametrize(
    "fn", ["temperature", "power", "remapped", "ecc_unc", "clocks", "pcie_width"]
)
def test_gpu_lost_from_any_call(run: Any, nvml_world: Any, validate_report: Any, fn: str) -> None:
    nvml_world.set(fn, 1, err(pynvml.NVML_ERROR_GPU_IS_LOST))
    report = run()
    validate_report(report)
    c = the(report, "gpu_lost", 1)
    assert (c["status"], c["action"]) == ("unhealthy", "reboot")
    assert report["gpus"][1]["uuid"].startswith("GPU-00000001")


def test_reset_required(run: Any, nvml_world: Any) -> None:
    nvml_world.set("ecc_mode", 0, err(pynvml.NVML_ERROR_RESET_REQUIRED))
    c = the(run(), "gpu_lost", 0)
    assert (c["status"], c["action"]) == ("unhealthy", "reset_gpu")


@pytest.mark.parametrize(
    ("value", "status", "action"),
    [
        (0, "healthy", "none"),
        (1, "unhealthy", "reset_gpu"),
        (2, "unhealthy", "reboot"),
        (3, "degraded", "reset_gpu"),
        (4, "unhealthy", "reset_gpu"),
    ],
)
def test_recovery_action_field(
    run: Any, nvml_world: Any, value: int, status: str, action: str
) -> None:
    nvml_world.set("field", 0, value)
    c = the(run(), "recovery_action", 0)
    assert (c["status"], c["action"], c["evidence"]["value"]) == (status, action, value)


def test_recovery_action_field_not_supported(run: Any, nvml_world: Any) -> None:
    nvml_world.set("field", 0, ("ret", pynvml.NVML_ERROR_NOT_SUPPORTED))
    report = run()
    assert checks(report, "recovery_action", 0) == []
    assert report["status"] == "healthy"


def test_uncorrectable_ecc(run: Any, nvml_world: Any) -> None:
    nvml_world.set("ecc_unc", 0, 3).set("field", 0, 1)
    c = the(run(), "ecc", 0)
    assert (c["status"], c["action"]) == ("unhealthy", "reset_gpu")


def test_uncorrectable_ecc_contained_is_degraded(run: Any, nvml_world: Any) -> None:
    nvml_world.set("ecc_unc", 0, 3)  # recovery action NONE, no remap pending
    assert the(run(), "ecc", 0)["status"] == "degraded"


def test_correctable_ecc_above_limit(run: Any, nvml_world: Any) -> None:
    nvml_world.set("ecc_corr", 1, 25_000_000)
    assert the(run(), "ecc", 1)["status"] == "degraded"


@pytest.mark.parametrize(
    ("rows", "status", "action"),
    [
        ((0, 0, 1, 0), "unhealthy", "reset_gpu"),
        ((0, 3, 0, 1), "unhealthy", "replace"),
        ((0, 600, 0, 0), "degraded", "none"),
        ((2, 1, 0, 0), "healthy", "none"),
    ],
)
def test_remapped_rows(
    run: Any, nvml_world: Any, rows: tuple[int, ...], status: str, action: str
) -> None:
    nvml_world.set("remapped", 0, rows)
    c = the(run(), "remapped_rows", 0)
    assert (c["status"], c["action"]) == (status, action)


def test_retired_pages_pre_ampere(run: Any, nvml_world: Any) -> None:
    nvml_world.set("remapped", 0, err(pynvml.NVML_ERROR_NOT_SUPPORTED))
    nvml_world.set(
        f"retired:{pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS}", 0, [1] * 40
    )
    nvml_world.set(f"retired:{pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}", 0, [1] * 23)
    c = the(run(), "retired_pages", 0)
    assert (c["status"], c["action"]) == ("unhealthy", "replace")
    nvml_world.set(f"retired:{pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}", 0, [])
    nvml_world.set("retired_pending", 0, 1)
    c = the(run(now=T0 + timedelta(minutes=1)), "retired_pages", 0)
    assert (c["status"], c["action"]) == ("degraded", "reboot")


@pytest.mark.parametrize(
    ("mask", "status"),
    [(0x0, None), (0x1 | 0x4, None), (0x8, "degraded"), (0x40, "degraded"), (0x80, "degraded")],
)
def test_clock_event_reasons(run: Any, nvml_world: Any, mask: int, status: str | None) -> None:
    nvml_world.set("clocks", 0, mask)
    found = checks(run(), "clock_events", 0)
    assert [c["status"] for c in found] == ([status] if status else [])


def test_sustained_hw_slowdown_is_unhealthy(run: Any, nvml_world: Any) -> None:
    nvml_world.set("clocks", 0, 0x40)
    statuses = [
        the(run(now=T0 + timedelta(minutes=n)), "clock_events", 0)["status"] for n in range(6)
    ]
    assert statuses == ["degraded"] * 5 + ["unhealthy"]


def test_old_driver_throttle_reasons_fallback(run: Any, nvml_world: Any) -> None:
    nvml_world.set("clocks", 0, err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)).set("clocks_old", 0, 0x8)
    assert the(run(), "clock_events", 0)["status"] == "degraded"


@pytest.mark.parametrize(
    ("temp", "status", "action"),
    [(41, "healthy", "none"), (88, "degraded", "none"), (93, "unhealthy", "replace")],
)
def test_temperature_vs_device_thresholds(
    run: Any, nvml_world: Any, temp: int, status: str, action: str
) -> None:
    nvml_world.set("temperature", 0, temp)
    c = the(run(), "temperature", 0)
    assert (c["status"], c["action"]) == (status, action)
    assert c["evidence"]["shutdown_c"] == 92


def test_temperature_thresholds_not_supported_fall_back(run: Any, nvml_world: Any) -> None:
    for which in (
        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    ):
        nvml_world.set(f"threshold:{which}", 0, err(pynvml.NVML_ERROR_NOT_SUPPORTED))
    nvml_world.set("temperature", 0, 86)
    assert the(run(), "temperature", 0)["status"] == "degraded"


def test_power_unreadable_and_capped(run: Any, nvml_world: Any) -> None:
    nvml_world.set("power", 0, err(pynvml.NVML_ERROR_UNKNOWN)).set("power_limit", 1, 400_000)
    report = run()
    c = the(report, "readings", 0)
    assert c["status"] == "degraded" and "power_w" in c["evidence"]["unreadable"]
    assert report["gpus"][0]["power_w"] is None
    assert the(report, "power", 1)["status"] == "degraded"


def test_pcie_link_width_not_gen(run: Any, nvml_world: Any) -> None:
    nvml_world.set("pcie_width", 0, 8)
    nvml_world.set("pcie_gen_max", 1, 5)  # gen is never compared
    report = run()
    assert the(report, "pcie_link", 0)["status"] == "degraded"
    assert checks(report, "pcie_link", 1) == []


def test_pcie_replay_rate_between_runs(run: Any, nvml_world: Any) -> None:
    nvml_world.replays[0] = 1_000
    assert checks(run(), "pcie_replay") == []  # first run: baseline only, even if the count is high
    nvml_world.replays[0] = 1_020  # 20/min over 60 s: below Gen5 x16 limit ceil(1.92*16)=31
    assert checks(run(now=T0 + timedelta(seconds=60)), "pcie_replay") == []
    nvml_world.replays[0] = 1_060  # 40/min
    c = the(run(now=T0 + timedelta(seconds=120)), "pcie_replay", 0)
    assert c["status"] == "degraded" and c["evidence"]["limit_per_min"] == 31


def test_pcie_replay_baseline_resets_on_reboot(run: Any, nvml_world: Any) -> None:
    nvml_world.replays[0] = 5_000
    run()
    nvml_world.replays[0] = 50  # volatile counter reset at reboot
    assert checks(run(now=T0 + timedelta(seconds=60), boot_id="boot-b"), "pcie_replay") == []


def test_nvlink_link_down(run: Any, nvml_world: Any) -> None:
    nvml_world.set("nvlink_state:2", 0, 0)
    c = the(run(), "nvlink", 0)
    assert (c["status"], c["action"], c["evidence"]["links_down"]) == ("unhealthy", "reboot", [2])


def test_nvlink_error_counters(run: Any, nvml_world: Any) -> None:
    run()
    nvml_world.nvlink_counters[(0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)] = 3
    c = the(run(now=T0 + timedelta(seconds=60)), "nvlink_errors", 0)
    assert c["status"] == "degraded"
    nvml_world.nvlink_counters[(0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 1
    c = the(run(now=T0 + timedelta(seconds=120)), "nvlink_errors", 0)
    assert (c["status"], c["action"]) == ("unhealthy", "reset_gpu")


def test_no_nvlink_is_not_a_fault(run: Any, nvml_world: Any) -> None:
    nvml_world.nvlink_links = 0
    report = run()
    assert checks(report, "nvlink") == [] and report["status"] == "healthy"


def test_persistence_inforom_ecc_mode(run: Any, nvml_world: Any) -> None:
    nvml_world.set("persistence", 0, pynvml.NVML_FEATURE_DISABLED)
    nvml_world.set("inforom", 0, err(pynvml.NVML_ERROR_CORRUPTED_INFOROM))
    nvml_world.set("ecc_mode", 1, [1, 0])
    report = run()
    assert the(report, "persistence_mode", 0)["status"] == "degraded"
    assert the(report, "inforom", 0)["status"] == "degraded"
    c = the(report, "ecc_mode", 1)
    assert (c["status"], c["action"]) == ("degraded", "reboot")
    assert report["status"] == "degraded"


@pytest.mark.parametrize(
    "fn",
    [
        "temperature",
        "power",
        "memory",
        "util",
        "procs",
        "ecc_unc",
        "remapped",
        "clocks",
        "pcie_width",
        "replay",
        "persistence",
        "ecc_mode",
        "inforom",
        "nvlink_state:0",
    ],
)
def test_not_supported_is_never_a_fault(
    run: Any, nvml_world: Any, validate_report: Any, fn: str
) -> None:
    nvml_world.set(fn, 0, err(pynvml.NVML_ERROR_NOT_SUPPORTED))
    if fn == "remapped":  # pre-Ampere path then asks for retired pages: also unsupported
        for cause in (
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        ):
            nvml_world.set(f"retired:{cause}", 0, err(pynvml.NVML_ERROR_NOT_SUPPORTED))
        nvml_world.set("retired_pending", 0, err(pynvml.NVML_ERROR_NOT_SUPPORTED))
    report = run()
    validate_report(report)
    assert report["status"] == "healthy", [c for c in report["checks"] if c["status"] != "healthy"]


def test_classify_covers_the_codes_relied_on() -> None:
    expected = {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: ProbeErrorKind.LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: ProbeErrorKind.DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: ProbeErrorKind.LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NO_PERMISSION: ProbeErrorKind.NO_PERMISSION,
        pynvml.NVML_ERROR_NOT_SUPPORTED: ProbeErrorKind.NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: ProbeErrorKind.FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_GPU_IS_LOST: ProbeErrorKind.GPU_LOST,
        pynvml.NVML_ERROR_RESET_REQUIRED: ProbeErrorKind.RESET_REQUIRED,
        pynvml.NVML_ERROR_CORRUPTED_INFOROM: ProbeErrorKind.CORRUPTED_INFOROM,
        pynvml.NVML_ERROR_UNKNOWN: ProbeErrorKind.OTHER,
    }
    for code, kind in expected.items():
        exc = pynvml.NVMLError(code)
        assert isinstance(exc, pynvml.NVMLError)
        assert classify_nvml_error(exc).kind is kind, code


def test_real_nvml_init_without_driver(
    make_config: Callable[..., Any], validate_report: Any
) -> None:
    """The real pynvml on this machine: no libnvidia-ml -> a well-formed report, status unknown."""
    probe = NvmlGpuBackend().probe()
    if probe.init_error is None:
        pytest.skip("this machine has a working NVIDIA driver")
    report = run_once(make_config(fake_gpu=False), now=T0)
    validate_report(report)
    assert report["status"] in ("unknown", "unhealthy")
    if probe.init_error.kind is ProbeErrorKind.LIBRARY_NOT_FOUND:
        assert report["status"] == "unknown"
        assert the(report, "nvml")["evidence"]["error"] == "library_not_found"
    assert report["status"] != "healthy"
