"""On a machine with an NVIDIA GPU: the agent's readings of the real NVML and kernel log,
and bench/on_gpu.sh's table with every row ok. Read-only: nothing here resets or
reconfigures the GPU."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.agent import run_once
from tests.support.agent import agent_config

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _listed_gpus() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def test_the_agent_reads_every_gpu_nvidia_smi_lists_from_the_real_nvml(tmp_path: Path) -> None:
    count = _listed_gpus()
    cfg = agent_config(
        tmp_path,
        fleet="gpu",
        pool="gpu",
        node="gpu-0001",
        instance_id="gpu-0001",
        gpus_per_node=count,
        fake_gpu=False,
        boot_id=None,
        kernel_log=None,
        faults_file=None,
    )
    report = run_once(cfg, now=datetime.now(UTC), to_stdout=True)
    nvml = next(c for c in report["checks"] if c["name"] == "nvml")
    assert nvml["status"] == "healthy", nvml
    assert nvml["evidence"]["backend"] == "nvml"
    assert len(report["gpus"]) == count
    assert all(g["uuid"].startswith("GPU-") for g in report["gpus"])


def test_on_gpu_script_reads_what_nvidia_smi_reads(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(ROOT / "bench" / "on_gpu.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=320,
    )
    assert "reading" in run.stdout and "verdict" in run.stdout, run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
