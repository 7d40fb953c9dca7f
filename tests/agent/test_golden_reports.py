"""Golden reports: the agent's whole output for a representative set of GPU states.

Each case runs the public path (``navarch.agent.run_once``) one or more times with a fixed
clock, boot id, kernel log and agent version, on the fake backend (with its faults file,
or with readings edited snapshot by snapshot) or on the NVML backend over patched pynvml,
and compares the reports it returned, as sorted-key JSON, with
``tests/agent/golden/<case>.json``. The reports stored in the file:// store must be the
same documents. Regenerate after an intended change with NAVARCH_UPDATE_GOLDEN=1 and
review the diff: a refactor of the checks must leave every file byte-identical.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pynvml
import pytest

import navarch
from navarch.agent import AgentConfig, run_once
from navarch.agent.gpu import FakeGpuBackend, GpuProbe, GpuSnapshot
from navarch.stores import open_store

GOLDEN = Path(__file__).parent / "golden"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
VERSION = "0.0.0+golden"

XID_LINES = {
    48: "2026-03-01T11:58:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python, "
    "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
    63: "2026-03-01T11:58:01,000000+00:00 NVRM: Xid (PCI:0000:2a:00): 63, pid=1896, "
    "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "2026-03-01T11:58:02,000000+00:00 NVRM: Xid (PCI:0000:3a:00): 64, pid=1896, "
    "Row Remapper: Failed to remap row",
    79: "[  100.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.",
    94: "2026-03-01T11:58:03,000000+00:00 NVRM: Xid (PCI:0000:5d:00): 94, pid=12, name=python, "
    "Contained ECC error",
    95: "2026-03-01T11:58:04,000000+00:00 NVRM: Xid (PCI:0000:9a:00): 95, pid=12, name=python, "
    "Uncontained ECC error",
    154: "[  200.100000] NVRM: Xid (PCI:0000:ab:00): 154, GPU recovery action changed from 0x0 "
    "(None) to 0x2 (Node Reboot Required)",
    13: "[  300.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=77, name=python, Graphics Exception",
}
SXID = (
    "[  201.000000] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 32 LTSSM Fault Up"
)


class EditedBackend:
    """The fake H100 backend with readings replaced per GPU (and probe fields replaced)."""

    name = "fake"

    def __init__(
        self,
        count: int = 8,
        gpus: Mapping[int, Mapping[str, Any]] | None = None,
        **probe_fields: Any,
    ) -> None:
        self.count = count
        self.gpus = dict(gpus or {})
        self.probe_fields = probe_fields

    def probe(self) -> GpuProbe:
        base = FakeGpuBackend("train-0001", self.count).probe()
        snaps: list[GpuSnapshot] = [
            dataclasses.replace(g, **self.gpus.get(g.index, {})) for g in base.gpus
        ]
        return dataclasses.replace(base, gpus=tuple(snaps), **self.probe_fields)


@dataclass
class Harness:
    """What a case needs: configs, the kernel log, the faults file and the NVML world."""

    make_config: Callable[..., AgentConfig]
    tmp_path: Path
    nvml_world: Any
    monkeypatch: pytest.MonkeyPatch

    def config(self, **kw: Any) -> AgentConfig:
        return self.make_config(**kw)

    def kernel(self, cfg: AgentConfig, *lines: str) -> None:
        with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
            fh.write("".join(f"{line}\n" for line in lines))

    def faults(self, cfg: AgentConfig, doc: Mapping[str, Any]) -> None:
        Path(cfg.faults_file).write_text(json.dumps(doc))  # type: ignore[arg-type]

    def run(self, cfg: AgentConfig, minutes: float = 0, backend: Any = None) -> dict[str, Any]:
        report = run_once(cfg, now=T0 + timedelta(minutes=minutes), backend=backend)
        stored = json.loads(open_store(cfg.store).get(cfg.report_key).data)
        assert stored == report
        return report

    def nvml(self, cfg: AgentConfig | None = None, minutes: float = 0) -> dict[str, Any]:
        cfg = cfg or self.config(fake_gpu=False, gpus_per_node=self.nvml_world.count)
        with patch.multiple(pynvml, **self.nvml_world.functions()):
            return self.run(cfg, minutes)


Reports = list[dict[str, Any]]


def healthy(h: Harness) -> Reports:
    cfg = h.config()
    return [h.run(cfg), h.run(cfg, 1)]


def xid_79(h: Harness) -> Reports:
    cfg = h.config()
    h.kernel(cfg, XID_LINES[79])
    return [h.run(cfg), h.run(cfg, 1)]


def xid_48_63_64_94_95(h: Harness) -> Reports:
    cfg = h.config()
    h.kernel(cfg, *(XID_LINES[c] for c in (48, 63, 64, 94, 95)))
    return [h.run(cfg)]


def xid_154_sxid_and_application(h: Harness) -> Reports:
    cfg = h.config()
    h.kernel(cfg, XID_LINES[154], SXID, XID_LINES[13], XID_LINES[13].replace("300.0", "300.5"))
    return [h.run(cfg)]


def xid_79_counted_over_three_boots(h: Harness) -> Reports:
    out = []
    for n, boot in enumerate(["boot-a", "boot-b", "boot-c"]):
        cfg = h.config(boot_id=boot)
        h.kernel(cfg, XID_LINES[79])
        out.append(h.run(cfg, 60 * n))
    return out


def ecc_volatile_uncorrected(h: Harness) -> Reports:
    cfg = h.config()
    h.faults(cfg, {"ecc_uncorrected": {"1": 2}})
    edited = EditedBackend(
        gpus={
            1: {"ecc_uncorrected_volatile": 2, "recovery_action": 1},
            2: {"ecc_uncorrected_volatile": 3, "recovery_action": 0},
            3: {"ecc_corrected_volatile": 25_000_000},
            4: {"ecc_mode_current": False},
            5: {"ecc_mode_pending": False},
            6: {"recovery_action": 3},
            7: {"recovery_action": 2},
        }
    )
    return [h.run(cfg), h.run(h.config(state_file=str(h.tmp_path / "s2.json")), 1, edited)]


def remapped_rows(h: Harness) -> Reports:
    cfg = h.config()
    h.faults(cfg, {"remapped_rows_pending": [5], "remapped_rows_failure": [6]})
    edited = EditedBackend(gpus={2: {"remapped_rows_uncorrected": 600}})
    return [h.run(cfg), h.run(h.config(state_file=str(h.tmp_path / "s2.json")), 1, edited)]


def retired_pages(h: Harness) -> Reports:
    cfg = h.config()
    pages = {"retired_pages_sbe": 2, "retired_pages_dbe": 0, "retired_pages_pending": False}
    edited = EditedBackend(
        gpus={
            0: {**pages, "retired_pages_sbe": 40, "retired_pages_dbe": 30},
            1: {**pages, "retired_pages_pending": True},
            2: pages,
        }
    )
    return [h.run(cfg, 0, edited)]


def thermal_and_power_slowdown(h: Harness) -> Reports:
    cfg = h.config()
    edited = EditedBackend(
        gpus={
            0: {"temperature_c": 88.0},
            1: {"temperature_c": 97.0},
            2: {"power_limit_w": 500.0},
            3: {"clock_event_reasons": 0x40},
            4: {"clock_event_reasons": 0x80 | 0x8},
            5: {"clock_event_reasons": 0x8},
            6: {
                "temperature_c": 86.0,
                "temperature_gpu_max_c": None,
                "temperature_slowdown_c": None,
                "temperature_shutdown_c": None,
            },
            7: {"temperature_c": None},
        }
    )
    reports = [h.run(cfg, n, edited) for n in range(7)]
    return [reports[0], reports[-1]]


def pcie_width_and_replays(h: Harness) -> Reports:
    cfg = h.config()
    first = h.run(cfg, 0, EditedBackend(gpus={0: {"pcie_link_width": 8}}))
    second = h.run(
        cfg,
        1,
        EditedBackend(
            gpus={
                0: {"pcie_link_width": 8},
                1: {"pcie_replay_count": 1000},
                2: {"pcie_replay_count": 5},
            }
        ),
    )
    return [first, second]


def nvlink_down_and_errors(h: Harness) -> Reports:
    cfg = h.config()
    links = (True,) * 18
    down = (True, True, True, False) + (True,) * 3 + (False,) + (True,) * 10
    zero = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    first = h.run(cfg, 0, EditedBackend(gpus={0: {"nvlink_active": down}}))
    second = h.run(
        cfg,
        1,
        EditedBackend(
            gpus={
                0: {"nvlink_active": down},
                1: {"nvlink_errors": {**zero, "replay": 1}},
                2: {"nvlink_errors": {**zero, "crc_flit": 10}},
                3: {"nvlink_errors": {**zero, "crc_data": 60_000}},
                4: {"nvlink_errors": {**zero, "recovery": 2}, "nvlink_active": links},
                5: {"nvlink_active": None, "nvlink_errors": None},
            }
        ),
    )
    return [first, second]


def lost_gpu(h: Harness) -> Reports:
    cfg = h.config()
    h.faults(cfg, {"gpu_lost": [3]})
    reset = EditedBackend(gpus={4: {"reset_required": True}})
    return [h.run(cfg), h.run(cfg, 1, reset)]


def every_fake_fault(h: Harness) -> Reports:
    cfg = h.config()
    h.faults(
        cfg,
        {
            "gpu_lost": [3],
            "temperature_c": {"2": 97.0},
            "ecc_uncorrected": {"1": 2},
            "unreadable": {"4": ["power_w"], "7": ["process_count", "temperature_c"]},
            "utilization_pct": 35.0,
            "process_count": {"0": 1},
            "remapped_rows_pending": [5],
            "remapped_rows_failure": [6],
        },
    )
    return [h.run(cfg)]


def persistence_and_inforom(h: Harness) -> Reports:
    cfg = h.config()
    edited = EditedBackend(gpus={0: {"persistence_mode": False}, 1: {"inforom_valid": False}})
    return [h.run(cfg, 0, edited)]


def nvml_not_supported(h: Harness) -> Reports:
    w = h.nvml_world
    ns = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    w.set("remapped", 0, ns).set("field", 0, ("ret", pynvml.NVML_ERROR_NOT_SUPPORTED))
    w.set("power", 1, ns).set("ecc_mode", 1, ns).set("replay", 1, ns)
    w.set("clocks", 0, pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    w.set("clocks_old", 0, 0x8)
    w.set("temperature", 1, pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN))
    return [h.nvml()]


def nvml_healthy_with_counters(h: Harness) -> Reports:
    w = h.nvml_world
    first = h.nvml()
    w.replays[0] = 500
    w.nvlink_counters[(1, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 3
    cfg = h.config(fake_gpu=False, gpus_per_node=w.count)
    return [first, h.nvml(cfg, 1)]


def gpu_count_mismatch(h: Harness) -> Reports:
    fewer = h.run(h.config(gpu_count=7, state_file=str(h.tmp_path / "a.json")))
    more = h.run(h.config(gpu_count=9, state_file=str(h.tmp_path / "b.json")))
    unset = h.run(h.config(gpus_per_node=None, state_file=str(h.tmp_path / "c.json")))
    handle = h.run(
        h.config(state_file=str(h.tmp_path / "d.json")),
        0,
        EditedBackend(count=7, device_count=8, handle_errors=((7, "Unknown Error"),)),
    )
    return [fewer, more, unset, handle]


def nvml_init_errors(h: Harness) -> Reports:
    out = []
    for n, code in enumerate(
        [
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            pynvml.NVML_ERROR_NO_PERMISSION,
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
            pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            pynvml.NVML_ERROR_UNKNOWN,
        ]
    ):
        h.nvml_world.init_error = pynvml.NVMLError(code)
        cfg = h.config(fake_gpu=False, state_file=str(h.tmp_path / f"s{n}.json"))
        out.append(h.nvml(cfg))
    return out


def kernel_log_unreadable(h: Harness) -> Reports:
    from navarch.agent import kernel_log

    def no_kmsg(*args: Any, **kw: Any) -> Any:
        raise PermissionError(1, "Operation not permitted", "/dev/kmsg")

    h.monkeypatch.setattr(kernel_log, "journal_available", lambda: False)
    h.monkeypatch.setattr(kernel_log, "read_kmsg", no_kmsg)
    return [h.nvml(h.config(fake_gpu=False, kernel_log=None, gpus_per_node=2))]


class _BrokenBackend:
    name = "nvml"

    def probe(self) -> GpuProbe:
        raise RuntimeError("bug in a backend")


def agent_error_and_notice(h: Harness) -> Reports:
    notice = h.tmp_path / "notice.json"
    notice.write_text(
        json.dumps(
            {
                "kind": "preemption",
                "source": "local",
                "deadline": "2026-03-01T12:02:00Z",
                "detail": "injected",
            }
        )
    )
    cfg = h.config(notice_file=str(notice))
    return [h.run(cfg, 0, _BrokenBackend())]


CASES: dict[str, Callable[[Harness], Reports]] = {
    f.__name__: f
    for f in (
        healthy,
        xid_79,
        xid_48_63_64_94_95,
        xid_154_sxid_and_application,
        xid_79_counted_over_three_boots,
        ecc_volatile_uncorrected,
        remapped_rows,
        retired_pages,
        thermal_and_power_slowdown,
        pcie_width_and_replays,
        nvlink_down_and_errors,
        lost_gpu,
        every_fake_fault,
        persistence_and_inforom,
        nvml_not_supported,
        nvml_healthy_with_counters,
        gpu_count_mismatch,
        nvml_init_errors,
        kernel_log_unreadable,
        agent_error_and_notice,
    )
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_report_matches_golden(
    case: str,
    make_config: Callable[..., AgentConfig],
    tmp_path: Path,
    nvml_world: Any,
    validate_report: Callable[[dict[str, Any]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(navarch, "__version__", VERSION)
    reports = CASES[case](Harness(make_config, tmp_path, nvml_world, monkeypatch))
    for report in reports:
        validate_report(report)
    text = json.dumps(reports, indent=1, sort_keys=True) + "\n"
    path = GOLDEN / f"{case}.json"
    if os.environ.get("NAVARCH_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} differs from the agent's reports"
