"""Sweeps: a scenario over many seeds, run in local processes or written as an engine's
job, and pooled with bootstrap intervals (navarch.simulate.sweep)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from navarch.errors import ConfigError
from navarch.simulate.sweep import (
    job_spec,
    merge_dir,
    merge_docs,
    parse_policies,
    parse_seeds,
    render_job,
    result_path,
    run_sweep,
)

TINY = Path(__file__).parent / "scenarios" / "sweep-tiny.yaml"
REPO = Path(__file__).resolve().parents[2]


def test_seeds_are_read_as_ranges_and_lists_in_order_without_repeats() -> None:
    assert parse_seeds("31-34") == (31, 32, 33, 34)
    assert parse_seeds("1,4,7-9,4") == (1, 4, 7, 8, 9)


@pytest.mark.parametrize("text", ["9-3", "a-b", "1,,2", "0-100000"])
def test_a_seed_list_that_is_not_one_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_seeds(text)
    assert err.value.key_path == "--seeds"


def test_an_unknown_policy_is_refused_with_the_known_ones() -> None:
    assert parse_policies(None) == ("default",)
    with pytest.raises(ConfigError, match="spares"):
        parse_policies("default,sparez")


def _doc(seed: int, cordon: list[float], availability: float, wrongful: int = 0) -> dict:
    return {
        "seed": seed,
        "policy": "default",
        "faults": len(cordon),
        "fault_to_cordon_s": cordon,
        "fault_to_serving_s": [c + 600 for c in cordon],
        "availability": availability,
        "wrongful_terminations": wrongful,
    }


def test_merging_pools_every_seeds_latencies_and_brackets_each_figure() -> None:
    docs = [
        _doc(1, [20, 30, 40], 0.999),
        _doc(2, [25, 35], 0.998, wrongful=1),
        _doc(3, [30, 300], 0.990),
    ]
    merged = merge_docs(docs)["policies"]["default"]
    assert merged["seeds"] == [1, 2, 3]
    assert merged["faults"] == 7
    assert merged["wrongful_terminations"] == 1
    p95 = merged["p95_fault_to_cordon_s"]
    assert p95["value"] == 300  # the pooled nearest-rank p95 of the seven latencies
    assert p95["low"] <= p95["value"] <= p95["high"]
    assert p95["low"] < p95["high"]  # seed 3's 300 s is in some resamples, not in others
    a = merged["availability"]
    assert a["value"] == pytest.approx((0.999 + 0.998 + 0.990) / 3)
    assert a["low"] < a["value"] < a["high"]
    assert merge_docs(docs) == merge_docs(list(reversed(docs)))  # the same files, the same figures


def test_a_sweep_runs_its_seeds_in_processes_and_resumes_without_running_one_twice(
    tmp_path: Path,
) -> None:
    done: list[tuple[str, int]] = []
    files = run_sweep(
        str(TINY), (1, 2), ("default",), tmp_path, 2, on_done=lambda *r: done.append(r)
    )
    assert sorted(done) == [("default", 1), ("default", 2)]
    assert [json.loads(p.read_text())["seed"] for p in files] == [1, 2]
    first = result_path(tmp_path, "default", 1).stat().st_mtime_ns
    done.clear()
    run_sweep(str(TINY), (1, 2, 3), ("default",), tmp_path, 2, on_done=lambda *r: done.append(r))
    assert done == [("default", 3)]
    assert result_path(tmp_path, "default", 1).stat().st_mtime_ns == first
    assert merge_dir(tmp_path)["policies"]["default"]["seeds"] == [1, 2, 3]


def test_merge_names_a_file_that_is_not_a_result(tmp_path: Path) -> None:
    bad = result_path(tmp_path, "default", 7)
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="seed-7.json"):
        merge_dir(tmp_path)


def test_the_kubernetes_job_runs_one_seed_per_completion_index(tmp_path: Path) -> None:
    job = yaml.safe_load(
        render_job(job_spec(str(TINY), "31-60", ("default",), tmp_path), "kubernetes")
    )
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"]) == ("Indexed", 30)
    command = spec["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--index") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert command[command.index("--seeds") + 1] == "31-60"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    check = subprocess.run(
        [str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_slurm_output_directory_with_a_space_is_refused(tmp_path: Path) -> None:
    spec = job_spec(str(TINY), "1-2", ("default",), tmp_path / "with space")
    with pytest.raises(ConfigError) as err:
        render_job(spec, "slurm")
    assert err.value.key_path == "--out"
