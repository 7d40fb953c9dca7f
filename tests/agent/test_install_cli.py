"""Templates (cloud-init, systemd units) and the agent's CLI: `navarch agent ...` and
`navarch render` in this process (tests/support/cli.py), and `python -m navarch.agent`, the
entry point the bundle runs, as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.agent import load_config
from navarch.agent.bootstrap import BundleSource, render_cloud_init, render_units
from navarch.agent.install import install_units
from navarch.fleet.load import load_fleet
from navarch.fleet.secret import read_fleet_secret
from navarch.report import signing
from tests.support.cli import run_navarch
from tests.support.fake_agent import write_agent_yaml
from tests.support.system import require_system_package

REPO = Path(__file__).resolve().parents[2]
AWS_FLEET = REPO / "fleet.aws.example.yaml"
SECRET = "0f" * 32
XID79 = "[  100.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def navarch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`navarch ARGS` run from the repository, in this process."""
    return run_navarch(args, cwd=REPO, env=env)


@pytest.fixture
def aws_spec(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", SECRET)
    return load_fleet(AWS_FLEET)


BUNDLE = BundleSource("https://artifacts.example.com/navarch-agent.pyz", "ab" * 32)


def user_data_files(text: str) -> dict[str, str]:
    doc = yaml.safe_load(text)
    return {f["path"]: f["content"] for f in doc["write_files"]}


def test_cloud_init_carries_a_working_agent_config(aws_spec: Any, tmp_path: Path) -> None:
    key = signing.derive_node_key(read_fleet_secret(aws_spec), aws_spec.name, "train-0007")
    text = render_cloud_init(aws_spec, "train", "train-0007", key, bundle=lambda: BUNDLE)
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    files = user_data_files(text)
    assert set(files) == {
        "/etc/navarch/agent.yaml",
        "/etc/systemd/system/navarch-agent.service",
        "/etc/systemd/system/navarch-agent.timer",
        "/usr/local/bin/navarch",
    }
    cfg_path = tmp_path / "agent.yaml"
    cfg_path.write_text(files["/etc/navarch/agent.yaml"])
    cfg = load_config(cfg_path)
    assert (cfg.fleet, cfg.pool, cfg.node, cfg.store) == (
        aws_spec.name,
        "train",
        "train-0007",
        aws_spec.store_url,
    )
    assert cfg.node_key() == key
    assert cfg.gpus_per_node == aws_spec.pool("train").gpus_per_node
    assert cfg.metadata == "aws"
    (script,) = doc["runcmd"]
    assert "systemctl enable --now navarch-agent.timer" in script
    assert f"URL={BUNDLE.url}\n" in script and f"SHA256={BUNDLE.sha256}\n" in script
    assert "pip install" not in text and "packages" not in doc
    perms = {f["path"]: f["permissions"] for f in doc["write_files"]}
    assert perms["/etc/navarch/agent.yaml"] == "0600"
    assert "OnUnitActiveSec=30s" in files["/etc/systemd/system/navarch-agent.timer"]
    assert "RandomizedDelaySec=" in files["/etc/systemd/system/navarch-agent.timer"]


@pytest.mark.system
def test_cloud_init_passes_cloud_init_schema(aws_spec: Any, tmp_path: Path) -> None:
    require_system_package("cloud-init", "cloud-init")
    key = signing.derive_node_key(read_fleet_secret(aws_spec), aws_spec.name, "train-0007")
    path = tmp_path / "user-data.yaml"
    path.write_text(render_cloud_init(aws_spec, "train", "train-0007", key, bundle=lambda: BUNDLE))
    res = subprocess.run(
        ["cloud-init", "schema", "--config-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.system
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    require_system_package("systemd", "systemd-analyze")
    cfg_path = write_agent_yaml(tmp_path)
    done = install_units(str(cfg_path), config=load_config(cfg_path), root=str(tmp_path / "root"))
    unit_dir = tmp_path / "root" / "etc/systemd/system"
    assert done == [
        f"wrote {unit_dir / 'navarch-agent.service'}",
        f"wrote {unit_dir / 'navarch-agent.timer'}",
    ]
    res = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(unit_dir / "navarch-agent.service"),
            str(unit_dir / "navarch-agent.timer"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
    service = (unit_dir / "navarch-agent.service").read_text()
    assert f"ReadWritePaths={tmp_path} {tmp_path}/store" in service
    for forbidden in ("PrivateDevices=", "ProtectKernelLogs=", "DevicePolicy="):
        assert f"\n{forbidden}" not in service  # the agent must reach /dev/nvidia* and /dev/kmsg


def test_units_render_interval_and_jitter() -> None:
    units = render_units(exec_start="/usr/bin/true", interval_s=300, jitter_s=30)
    timer = units["navarch-agent.timer"]
    assert "OnUnitActiveSec=300s" in timer and "RandomizedDelaySec=30s" in timer
    assert "ExecStart=/usr/bin/true" in units["navarch-agent.service"]


def test_cli_run_once_writes_a_report(tmp_path: Path, validate_report: Any) -> None:
    cfg_path = write_agent_yaml(tmp_path, kernel_log=str(tmp_path / "kern.log"))
    (tmp_path / "kern.log").write_text(XID79)
    res = navarch("agent", "run", "--once", "--config", str(cfg_path))
    assert res.returncode == 0, res.stderr
    logs = [json.loads(line) for line in res.stdout.splitlines()]
    assert logs[-1]["event"] == "report_written" and logs[-1]["status"] == "unhealthy"
    report = json.loads((tmp_path / "store/health/demo/train/train-0001.json").read_bytes())
    validate_report(report)
    assert [x["code"] for x in report["xids"]] == [79]
    assert signing.verify(report, bytes.fromhex("5a" * 32))


def test_cli_stdout_and_kernel_log_flag(tmp_path: Path, validate_report: Any) -> None:
    cfg_path = write_agent_yaml(tmp_path)
    log = tmp_path / "dmesg.txt"
    log.write_text(XID79)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "navarch.agent",
            "run",
            "--once",
            "--stdout",
            "--config",
            str(cfg_path),
            "--kernel-log",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    validate_report(report)
    assert report["status"] == "unhealthy" and report["xids"][0]["pci_bus_id"] == "0000:2a:00"
    assert not (tmp_path / "store").exists()
    assert all(json.loads(line)["event"] for line in res.stderr.splitlines())


def test_cli_exits_nonzero_only_when_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store directory should be")
    cfg_path = write_agent_yaml(tmp_path, store=f"file://{blocker}/store")
    res = navarch("agent", "run", "--once", "--config", str(cfg_path))
    assert res.returncode == 1
    assert json.loads(res.stdout.splitlines()[-1])["event"] == "report_not_written"
    missing = navarch("agent", "run", "--once", "--config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and "cannot read agent config" in missing.stdout


def test_cli_install_dry_run_writes_nothing(tmp_path: Path) -> None:
    cfg_path = write_agent_yaml(tmp_path)
    res = navarch(
        "agent", "install", "--config", str(cfg_path), "--dry-run", "--root", str(tmp_path / "root")
    )
    assert res.returncode == 0, res.stderr
    assert "[Timer]" in res.stdout and "[Service]" in res.stdout
    assert not (tmp_path / "root").exists()


def test_cli_render_cloud_init(tmp_path: Path) -> None:
    res = navarch(
        "render",
        "cloud-init",
        str(AWS_FLEET),
        "--pool",
        "train",
        "--node",
        "train-0003",
        "--bundle-url",
        BUNDLE.url,
        "--reveal-key",
        env={"NAVARCH_FLEET_SECRET": SECRET},
    )
    assert res.returncode == 0, res.stderr
    agent_yaml = yaml.safe_load(user_data_files(res.stdout)["/etc/navarch/agent.yaml"])
    spec_name = yaml.safe_load(AWS_FLEET.read_text())["fleet"]
    assert (
        agent_yaml["key"] == signing.derive_node_key(SECRET.encode(), spec_name, "train-0003").hex()
    )
    bad = navarch(
        "render",
        "cloud-init",
        str(AWS_FLEET),
        "--pool",
        "nope",
        env={"NAVARCH_FLEET_SECRET": SECRET},
    )
    assert bad.returncode == 1 and "no pool 'nope'" in bad.stderr


def test_run_once_in_process_matches_cli_contract(
    make_config: Callable[..., Any], read_stored: Any
) -> None:
    from navarch.agent import run_once

    cfg = make_config()
    report = run_once(cfg)
    assert read_stored(cfg)["sequence"] == report["sequence"]
