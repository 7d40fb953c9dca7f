"""A driver that hangs is a fault, not silence: every NVML call runs under a deadline, a call
that never returns is reported as gpu_hung (which GPU, which call, how long), the kernel
log is read first, and a transient NVML error is tolerated three runs before unhealthy."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pynvml
import pytest

from navarch.agent.deadline import CallHung, DeadlineCaller
from tests.support.agent import T0

XID_79 = (
    "2026-03-01T11:59:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus."
)


@pytest.fixture
def never() -> Iterator[threading.Event]:
    """An event the blocked call waits on; set at teardown so its thread ends."""
    ev = threading.Event()
    yield ev
    ev.set()


def checks(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["name"] == name]


def test_a_call_that_never_returns_is_reported_as_gpu_hung_within_the_deadline(
    run: Any, nvml_world: Any, never: threading.Event, validate_report: Any
) -> None:
    nvml_world.set("power", 1, never.wait)  # nvmlDeviceGetPowerUsage blocks on GPU 1
    start = time.monotonic()
    report = run(nvml_call_timeout_s=0.2, nvml_budget_s=5.0)
    assert time.monotonic() - start < 3.0
    validate_report(report)
    (hung,) = checks(report, "gpu_hung")
    assert (hung["status"], hung["action"], hung["gpu_index"]) == ("unhealthy", "reboot", 1)
    assert hung["fault_key"] == {"kind": "gpu_hung", "gpu_index": 1}
    ev = hung["evidence"]
    assert (ev["call"], ev["waited_s"], ev["pci_bus_id"]) == (
        "nvmlDeviceGetPowerUsage",
        0.2,
        "0000:28:00",
    )
    assert hung["gpu"]["pci_bus_id"] == "0000:28:00"
    assert "nvmlDeviceGetPowerUsage did not return within 0.2 s" in hung["message"]
    assert report["status"] == "unhealthy"
    assert [g["index"] for g in report["gpus"]] == [0]  # GPU 0 read before the hang


def test_the_kernel_log_is_in_the_report_when_nvml_init_hangs(
    run: Any, nvml_world: Any, never: threading.Event, tmp_path: Path, validate_report: Any
) -> None:
    (tmp_path / "kern.log").write_text(XID_79 + "\n")
    nvml_world.init_blocks_on = never
    report = run(nvml_call_timeout_s=0.2)
    validate_report(report)
    (hung,) = checks(report, "gpu_hung")
    assert hung["gpu_index"] is None and hung["evidence"]["call"] == "nvmlInit"
    assert [c["fault_key"]["kind"] for c in checks(report, "xid")] == ["xid:79"]
    assert checks(report, "nvml") == [] and checks(report, "gpu_count") == []


def test_a_hung_call_ends_the_probe_without_calling_nvml_again(
    run: Any, nvml_world: Any, never: threading.Event
) -> None:
    calls: list[int] = []
    nvml_world.set("temperature", 0, never.wait)
    nvml_world.set("power", 1, lambda: calls.append(1) or 95_000)
    report = run(nvml_call_timeout_s=0.2)
    (hung,) = checks(report, "gpu_hung")
    assert hung["gpu_index"] == 0 and hung["evidence"]["gpus_not_read"] == [1]
    assert calls == [] and report["gpus"] == []


def test_the_run_budget_bounds_all_calls_together() -> None:
    """Each call's wait is the smaller of its deadline and what is left of the budget;
    with the budget spent, a call is reported hung without being made."""
    ticks = iter([0.0, 1.0, 1.0, 2.0])
    made: list[str] = []
    caller = DeadlineCaller(call_timeout_s=10.0, budget_s=1.5, clock=lambda: next(ticks))
    assert caller.call("a", lambda: made.append("a") or 1) == 1
    assert caller.call("b", lambda: made.append("b") or 2) == 2
    with pytest.raises(CallHung, match="c not called: the run's time for library calls"):
        caller.call("c", lambda: made.append("c"))
    assert made == ["a", "b"]


def test_three_transient_nvml_errors_are_tolerated_and_the_fourth_is_unhealthy(
    run: Any, nvml_world: Any
) -> None:
    nvml_world.init_error = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    verdicts = []
    for n in range(4):
        report = run(now=T0 + timedelta(seconds=30 * n))
        (c,) = checks(report, "nvml")
        verdicts.append((report["status"], c["status"], c["action"]))
    assert verdicts == [("healthy", "healthy", "none")] * 3 + [("unhealthy", "unhealthy", "reboot")]
    nvml_world.init_error = None
    run(now=T0 + timedelta(seconds=150))  # a clean start ends the run of errors
    nvml_world.init_error = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    report = run(now=T0 + timedelta(seconds=180))
    assert checks(report, "nvml")[0]["status"] == "healthy"


def test_agent_run_once_stdout_prints_gpu_hung_and_exits_when_nvml_init_never_returns(
    tmp_path: Path,
) -> None:
    """The whole CLI in its own process: nvmlInit blocks forever, yet the report is printed
    and the process exits (the stuck call's worker is a daemon thread, which the
    interpreter does not wait for; a concurrent.futures worker would be joined at exit)."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        "fleet: demo\npool: train\nnode: train-0001\n"
        f"store: file://{tmp_path}/store\nkey: '{'5a' * 32}'\ngpus_per_node: 8\n"
        f"state_file: {tmp_path}/state.json\nboot_id: boot-a\nmetadata: none\n"
        f"kernel_log: {tmp_path}/kern.log\nnvml_call_timeout_s: 0.5\n"
    )
    code = (
        "import sys, threading, pynvml\n"
        "pynvml.nvmlInit = lambda *a, **k: threading.Event().wait()\n"
        "from navarch.cli import main\n"
        "sys.exit(main(['agent', 'run', '--once', '--stdout', '--config', sys.argv[1]]))\n"
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - start < 30
    report = json.loads(done.stdout)
    (hung,) = checks(report, "gpu_hung")
    assert (hung["evidence"]["call"], hung["evidence"]["waited_s"]) == ("nvmlInit", 0.5)
    assert report["status"] == "unhealthy"


def test_each_run_ends_its_worker_thread(run: Any) -> None:
    """A long-running agent (navarch agent watch) probes every interval: a healthy run
    leaves no NVML worker behind."""
    before = {t.ident for t in threading.enumerate() if t.name == "navarch-nvml"}
    run()
    time.sleep(0.05)
    assert {t.ident for t in threading.enumerate() if t.name == "navarch-nvml"} <= before


def test_the_default_deadlines_of_one_run_fit_under_the_units_timeout() -> None:
    """docs/agent.md "Deadlines": journalctl, every NVML call, systemctl, the notices and
    one plugin together stay under TimeoutStartSec, so the report is written before
    systemd would kill the run."""
    import inspect

    from navarch.agent import AgentConfig
    from navarch.agent.bootstrap import DEFAULT_TIMEOUT_S
    from navarch.agent.fabric import SYSTEMCTL_TIMEOUT_S
    from navarch.agent.kernel_log import read_journal

    cfg = AgentConfig(fleet="f", pool="p", node="n", store="file:///tmp")
    journal_s = inspect.signature(read_journal).parameters["timeout_s"].default
    notices_s = 6 * cfg.metadata_timeout_s
    total_s = (
        journal_s + cfg.nvml_budget_s + SYSTEMCTL_TIMEOUT_S + notices_s + cfg.plugin_check_timeout_s
    )
    assert cfg.nvml_call_timeout_s <= cfg.nvml_budget_s
    assert total_s < DEFAULT_TIMEOUT_S - 15  # room for signing and the store write
