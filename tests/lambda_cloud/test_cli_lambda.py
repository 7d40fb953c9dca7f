"""navarch's CLI end to end as a subprocess, on Lambda Cloud: the fake Lambda API.

The child reaches the fake only through the fleet's `api_base`; the API key comes from
the environment variable the fleet names. State lives in a file:// store (the GCS store's
end-to-end tests are in tests/gcp/test_cli_gcp.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.cli import kill_apply_mid_launch, run_navarch

FLEET = "lab"
ROOT = Path(__file__).resolve().parents[2]
API_KEY = "secret_navarch-test_0123456789abcdef"  # the fake's key (conftest.API_KEY)


def write_fleet(
    tmp_path: Path,
    api_base: str,
    *,
    target: int = 2,
    regions: tuple[str, ...] = ("us-east-1", "us-west-1"),
) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"""\
fleet: {FLEET}
store: file://state
secret: {{file: fleet.secret}}
providers:
  lambda:
    type: lambda
    api_key_env: LAMBDA_API_KEY
    api_base: {api_base}
    ssh_key_name: navarch
    launch_interval_s: 0
pools:
  train:
    provider: lambda
    instance_types: [gpu_8x_h100_sxm5, gpu_1x_a10]
    gpus_per_node: 8
    zones: [{", ".join(regions)}]
    nodes: {{min: 0, target: {target}, max: {target + 2}}}
    labels: {{team: lab}}
    health:
      boot_timeout: 1h
    lambda:
      image: {{family: lambda-stack-22-04}}
"""
    )
    return path


def navarch(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_navarch(
        args, cwd=cwd, env={"LAMBDA_API_KEY": API_KEY, "PYTHONPATH": str(ROOT), **(env or {})}
    )


def ours(fake) -> list[dict]:
    return [i for i in fake.live() if {"key": "navarch-fleet", "value": FLEET} in i["tags"]]


def test_converge_then_no_op(fake_lambda, lambda_api_base, tmp_path) -> None:
    fleet = write_fleet(tmp_path, lambda_api_base)
    run = navarch(["apply", str(fleet), "--auto-approve"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = ours(fake_lambda)
    assert sorted(i["name"] for i in got) == [f"{FLEET}-train-0001", f"{FLEET}-train-0002"]
    # Lambda's zones are regions: the pool spreads over them (zone_policy: spread).
    assert sorted(i["region"]["name"] for i in got) == ["us-east-1", "us-west-1"]
    assert {i["instance_type"]["name"] for i in got} == {"gpu_8x_h100_sxm5"}
    launches = [b for m, p, b in fake_lambda.calls if p.endswith("/launch")]
    assert len(launches) == 2
    assert all(len(b["ssh_key_names"]) == 1 for b in launches)
    assert all(b["user_data"].startswith("#cloud-config") for b in launches)
    assert all(f"# navarch node {b['name']} of fleet {FLEET}" in b["user_data"] for b in launches)
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr


def test_capacity_falls_over_to_next_region_then_type(
    fake_lambda, lambda_api_base, tmp_path
) -> None:
    fake_lambda.capacity["gpu_8x_h100_sxm5"] = {"us-west-1"}
    fake_lambda.capacity["gpu_1x_a10"] = set()
    fleet = write_fleet(tmp_path, lambda_api_base, target=1)
    run = navarch(["apply", str(fleet), "--auto-approve"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    [inst] = ours(fake_lambda)
    assert inst["region"]["name"] == "us-west-1"
    # us-east-1 was listed without capacity: no launch was spent on it.
    assert fake_lambda.count("POST", r"/launch$") == 1

    fake_lambda.capacity["gpu_8x_h100_sxm5"] = set()
    fake_lambda.capacity["gpu_1x_a10"] = {"us-east-1"}
    fleet = write_fleet(tmp_path, lambda_api_base, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(i["instance_type"]["name"] for i in ours(fake_lambda)) == [
        "gpu_1x_a10",
        "gpu_8x_h100_sxm5",
    ]


def test_killed_apply_does_not_duplicate(fake_lambda, lambda_api_base, tmp_path) -> None:
    fleet = write_fleet(tmp_path, lambda_api_base, target=3)
    fake_lambda.hold_nth = 2  # the second launch
    kill_apply_mid_launch(
        fleet,
        cwd=tmp_path,
        reached=fake_lambda.holding,
        env={"LAMBDA_API_KEY": API_KEY, "PYTHONPATH": str(ROOT)},
        timeout_s=60,
    )
    # The launch in flight when the run died still happens: Lambda has no token to dedupe it.
    fake_lambda.release.set()
    assert fake_lambda.held_done.wait(30)
    assert len(ours(fake_lambda)) == 2
    lock = json.loads((tmp_path / "state" / "state" / f"{FLEET}.lock").read_text())
    assert navarch(["force-unlock", str(fleet), lock["lock_id"]], tmp_path).returncode == 0
    run = navarch(["apply", str(fleet), "--auto-approve"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = ours(fake_lambda)
    assert sorted(i["name"] for i in got) == [f"{FLEET}-train-{n:04d}" for n in (1, 2, 3)]
    assert fake_lambda.count("POST", r"/launch$") == 3  # one per node, none twice


def test_foreign_instances_untouched(fake_lambda, lambda_api_base, tmp_path) -> None:
    foreign = fake_lambda.add_instance("jupyter-box", "us-east-1", {})
    other = fake_lambda.add_instance("other-0001", "us-east-1", {"navarch-fleet": "other"})
    fleet = write_fleet(tmp_path, lambda_api_base, target=1)
    assert navarch(["apply", str(fleet), "--auto-approve"], tmp_path).returncode == 0
    fleet = write_fleet(tmp_path, lambda_api_base, target=0)
    assert navarch(["apply", str(fleet), "--auto-approve"], tmp_path).returncode == 0
    # Cordoned and drained; without reports the drain ends at drain_timeout (30m).
    later = {"NAVARCH_NOW": "2099-01-01T00:00:00Z"}
    run = navarch(["apply", str(fleet), "--auto-approve"], tmp_path, env=later)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ours(fake_lambda) == []
    live = {i["id"] for i in fake_lambda.live()}
    assert live == {foreign, other}
    terminated = [b for m, p, b in fake_lambda.calls if p.endswith("/terminate")]
    assert all(
        foreign not in b["instance_ids"] and other not in b["instance_ids"] for b in terminated
    )
