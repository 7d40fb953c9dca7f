"""The node's instance type reaches its acceptance suite, so the baseline published for the
type (acceptance_tools.thresholds) is the floor: from agent.yaml when the pool's placement
allows one type, else from the cloud's metadata service (a local http.server speaking each
cloud's paths)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.agent import AgentConfig, load_config, run_once
from navarch.agent.acceptance_tools.instance_type import read_instance_type
from navarch.agent.bootstrap import BundleSource, render_cloud_init
from navarch.fleet.load import load_fleet
from navarch.fleet.secret import read_fleet_secret
from navarch.report import signing
from navarch.report.acceptance import AcceptancePolicy

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
ND96 = "Standard_ND96isr_H100_v5"
AZURE_VM_SIZE = "/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text"
BUNDLE = BundleSource("https://artifacts.example.com/navarch-agent.pyz", "ab" * 32)


def _nccl(report: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in report["acceptance"]["results"] if r["test"] == "nccl_all_reduce")


def _slow_nccl(tmp_path: Path) -> str:
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps({"nccl_busbw_gbps": 300}))
    return str(path)


def test_the_instance_type_from_metadata_holds_nccl_to_its_published_baseline(
    make_config: Callable[..., AgentConfig], metadata_server: Any, tmp_path: Path
) -> None:
    metadata_server.route("GET", AZURE_VM_SIZE, 200, ND96, {"Metadata": "true"})
    cfg = make_config(
        acceptance=AcceptancePolicy(expected_gpu_count=8),
        acceptance_file=_slow_nccl(tmp_path),
        metadata="azure",
        metadata_endpoint=metadata_server.url,
    )
    nccl = _nccl(run_once(cfg, now=T0))
    # 300 GB/s passes with no floor; the ND96isr H100 v5's published floor is 460 GB/s.
    assert (nccl["status"], nccl["figure"], nccl["threshold"]) == ("fail", 300.0, 460.0)
    assert "azurehpc-health-checks" in nccl["reason"]


def test_without_a_metadata_answer_no_baseline_is_guessed(
    make_config: Callable[..., AgentConfig], metadata_server: Any, tmp_path: Path
) -> None:
    cfg = make_config(
        acceptance=AcceptancePolicy(expected_gpu_count=8),
        acceptance_file=_slow_nccl(tmp_path),
        metadata="azure",
        metadata_endpoint=metadata_server.url,
    )
    nccl = _nccl(run_once(cfg, now=T0))
    assert (nccl["status"], nccl["threshold"]) == ("pass", None)


@pytest.mark.parametrize(
    ("cloud", "routes", "expected"),
    [
        (
            "aws",
            [
                (
                    "PUT",
                    "/latest/api/token",
                    "tok",
                    {"X-aws-ec2-metadata-token-ttl-seconds": "300"},
                ),
                ("GET", "/latest/meta-data/instance-type", "p5.48xlarge", {}),
            ],
            "p5.48xlarge",
        ),
        (
            "gcp",
            [
                (
                    "GET",
                    "/computeMetadata/v1/instance/machine-type",
                    "projects/123456/machineTypes/a3-highgpu-8g",
                    {"Metadata-Flavor": "Google"},
                )
            ],
            "a3-highgpu-8g",
        ),
        ("azure", [("GET", AZURE_VM_SIZE, ND96, {"Metadata": "true"})], ND96),
    ],
)
def test_each_clouds_metadata_names_the_instance_type(
    metadata_server: Any, cloud: str, routes: list[Any], expected: str
) -> None:
    for method, path, body, headers in routes:
        metadata_server.route(method, path, 200, body, headers)
    assert read_instance_type(cloud, endpoint=metadata_server.url) == (expected, [])


def test_a_hostile_metadata_answer_is_no_instance_type(metadata_server: Any) -> None:
    metadata_server.route("GET", AZURE_VM_SIZE, 200, "Standard ND96\x1b[31m", {"Metadata": "true"})
    found, errors = read_instance_type("azure", endpoint=metadata_server.url)
    assert found == "" and "not a type name" in errors[0]


def _azure_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, types: list[str]) -> Any:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", "0f" * 32)
    doc = yaml.safe_load((REPO / "fleet.azure.example.yaml").read_text())
    doc["pools"]["train"].update(instance_types=types, acceptance={"enabled": True})
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_fleet(path)


def _agent_yaml(spec: Any, tmp_path: Path) -> AgentConfig:
    key = signing.derive_node_key(read_fleet_secret(spec), spec.name, "train-0007")
    text = render_cloud_init(spec, "train", "train-0007", key, bundle=lambda: BUNDLE)
    files = {f["path"]: f["content"] for f in yaml.safe_load(text)["write_files"]}
    path = tmp_path / "agent.yaml"
    path.write_text(files["/etc/navarch/agent.yaml"])
    return load_config(path)


def test_a_pool_of_one_instance_type_names_it_in_the_agents_acceptance_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _agent_yaml(_azure_fleet(tmp_path, monkeypatch, [ND96]), tmp_path)
    assert cfg.acceptance is not None and cfg.acceptance.instance_type == ND96


def test_a_pool_of_several_instance_types_leaves_it_to_the_metadata_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _azure_fleet(tmp_path, monkeypatch, [ND96, "Standard_ND96amsr_A100_v4"])
    cfg = _agent_yaml(spec, tmp_path)
    assert cfg.acceptance is not None and cfg.acceptance.instance_type == ""
