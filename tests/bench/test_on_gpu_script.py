"""bench/on_gpu.sh off a GPU machine: a clear "no NVIDIA GPU" and exit 77, nothing run;
and the gpu test tier (tests/gpu), which skips here without failing CI's run."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.gpu import nvidia_driver_missing, require_nvidia_gpu

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "on_gpu.sh"
NO_GPU_EXIT = 77


def _fake_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(bin_dir: Path, out_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", **env},
    )


@pytest.mark.skipif(nvidia_driver_missing() is None, reason="this machine has an NVIDIA GPU")
def test_without_nvidia_smi_it_says_no_nvidia_gpu_and_exits_77(tmp_path: Path) -> None:
    run = _run(tmp_path, tmp_path / "out")
    assert run.returncode == NO_GPU_EXIT, run.stdout + run.stderr
    assert run.stderr.startswith("no NVIDIA GPU: nvidia-smi is not installed")
    assert not (tmp_path / "out").exists()  # nothing was run


def test_a_driver_that_lists_no_gpu_is_no_nvidia_gpu_too(tmp_path: Path) -> None:
    # nvidia-smi's message when its kernel module is not loaded (NVIDIA driver README).
    _fake_tool(
        tmp_path,
        "nvidia-smi",
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        'driver. Make sure that the latest NVIDIA driver is installed and running."; exit 9',
    )
    run = _run(tmp_path, tmp_path / "out")
    assert run.returncode == NO_GPU_EXIT, run.stdout + run.stderr
    assert "no NVIDIA GPU: nvidia-smi lists none (NVIDIA-SMI has failed" in run.stderr


@pytest.mark.skipif(nvidia_driver_missing() is None, reason="this machine has an NVIDIA GPU")
def test_a_listed_gpu_that_nvml_cannot_read_runs_every_step_and_fails_the_table(
    tmp_path: Path,
) -> None:
    # nvidia-smi answers (a real A100 log), but no NVML library is here: the agent reports
    # it and the GPU count row differs, so the script prints the table and exits 1.
    xml = ROOT / "tests" / "fixtures" / "acceptance" / "nvidia_smi_q_x_a100_sxm4_510.xml"
    _fake_tool(
        tmp_path,
        "nvidia-smi",
        'if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-27b94a00)";'
        f' else cat "{xml}"; fi',
    )
    run = _run(tmp_path, tmp_path / "out", PYTHON=sys.executable)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(line.split() == ["reading", "navarch", "nvidia-smi", "verdict"] for line in lines)
    count = next(line for line in lines if line.startswith("GPU count"))
    assert count.split() == ["GPU", "count", "0", "1", "DIFFERS"]
    assert (tmp_path / "out" / "navarch-agent.pyz").is_file()
    assert "not installed" in run.stdout  # dcgmi, nvbandwidth, all_reduce_perf


def test_the_gpu_tier_skips_without_a_driver_even_where_ci_requires_system_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    monkeypatch.setenv("NAVARCH_REQUIRE_SYSTEM_PACKAGES", "1")  # as .ci/run sets it
    monkeypatch.delenv("NAVARCH_REQUIRE_GPU", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no NVIDIA driver: nvidia-smi is not on PATH"):
        require_nvidia_gpu()
    monkeypatch.setenv("NAVARCH_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception, match="NAVARCH_REQUIRE_GPU=1 makes this a failure"):
        require_nvidia_gpu()


def test_the_gpu_marker_is_registered_and_the_tier_skips_through_its_conftest() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("gpu: ") for m in markers["markers"])
    conftest = (ROOT / "tests" / "gpu" / "conftest.py").read_text()
    assert "autouse=True" in conftest and "require_nvidia_gpu()" in conftest
    for test in (ROOT / "tests" / "gpu").glob("test_*.py"):
        assert "pytestmark = pytest.mark.gpu" in test.read_text(), test
