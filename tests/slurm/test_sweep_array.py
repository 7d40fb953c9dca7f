"""A simulate sweep written as a Slurm array job runs on the real test cluster: each array
task runs one seed and writes its result, and `navarch simulate merge` pools them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "simulate" / "scenarios" / "sweep-tiny.yaml"

pytestmark = pytest.mark.system


def _navarch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "navarch", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_sweep_submitted_as_a_slurm_array_writes_one_result_per_seed(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    emitted = _navarch(
        "simulate", str(TINY), "--seeds", "5-6", "--emit", "slurm", "--out", str(out), cwd=tmp_path
    )
    assert emitted.returncode == 0, emitted.stderr
    script = out / "sweep.sbatch"
    assert "#SBATCH --array=0-1" in script.read_text()
    env = {
        **slurm.env,
        "PYTHONPATH": str(REPO),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    job = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={tmp_path}", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    deadline = time.monotonic() + 300
    while any(j.startswith(job.split(";")[0]) for j, _ in slurm.jobs()):
        assert time.monotonic() < deadline, f"array job {job} still queued: {slurm.jobs()}"
        time.sleep(0.5)
    logs = "\n".join(p.read_text() for p in sorted(out.glob("slurm-*.out")))
    assert sorted(p.name for p in (out / "default").glob("seed-*.json")) == [
        "seed-5.json",
        "seed-6.json",
    ], logs
    merged = _navarch("simulate", "merge", str(out), "--json", "-", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["policies"]["default"]["seeds"] == [5, 6]
