"""`navarch reboot` and `navarch cordon` end to end on the local provider, and
the local provider's reboot(instances)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from navarch.errors import ProviderError
from navarch.providers.local import LocalProvider
from tests.support.cli import run_navarch

REPO = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def __call__(self, *args: str):
        return run_navarch(list(args), cwd=self.workdir)

    def ok(self, *args: str):
        proc = self(*args)
        assert proc.returncode == 0, f"navarch {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc

    def machines(self) -> dict[str, dict[str, Any]]:
        """node -> machine.json of the local provider."""
        root = self.workdir / ".navarch" / "local" / "demo" / "machines"
        out = {}
        for d in root.iterdir():
            m = json.loads((d / "machine.json").read_text())
            if "navarch-node" in m["tags"]:
                out[m["tags"]["navarch-node"]] = m
        return out

    def audit(self) -> list[dict[str, Any]]:
        root = self.workdir / ".navarch" / "store" / "events"
        return [
            json.loads(line)
            for p in sorted(root.rglob("*.jsonl"))
            for line in p.read_text().splitlines()
        ]

    def memory(self) -> dict[str, Any]:
        return json.loads((self.workdir / ".navarch" / "store" / "state" / "demo.json").read_text())


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    c = Cli(tmp_path)
    c.ok("apply", "fleet.yaml", "--auto-approve")
    c.ok("local", "tick", "fleet.yaml")
    return c


def test_reboot_gives_a_new_boot_on_the_same_instance(cli: Cli) -> None:
    before = cli.machines()
    out = cli.ok("reboot", "fleet.yaml", "demo-train-0001").stdout
    after = cli.machines()
    assert f"rebooted {before['demo-train-0001']['instance_id']}" in out
    assert after["demo-train-0001"]["boot_id"] != before["demo-train-0001"]["boot_id"]
    assert {n: m["instance_id"] for n, m in after.items()} == {
        n: m["instance_id"] for n, m in before.items()
    }
    assert after["demo-train-0002"]["boot_id"] == before["demo-train-0002"]["boot_id"]
    [record] = [r for r in cli.audit() if r["action"] == "reboot"]
    assert record["operator"] is True and record["ok"] is True
    assert record["node"] == "demo-train-0001"


def test_reboot_refuses_a_node_running_gpu_work_unless_forced(cli: Cli) -> None:
    cli.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--processes", "2")
    cli.ok("local", "tick", "fleet.yaml")
    boot = cli.machines()["demo-train-0001"]["boot_id"]
    refused = cli("reboot", "fleet.yaml", "demo-train-0001")
    assert refused.returncode == 1 and "GPU process" in refused.stderr
    assert cli.machines()["demo-train-0001"]["boot_id"] == boot
    cli.ok("reboot", "fleet.yaml", "demo-train-0001", "--force")
    assert cli.machines()["demo-train-0001"]["boot_id"] != boot


def test_reboot_of_an_unknown_node_is_an_error(cli: Cli) -> None:
    proc = cli("reboot", "fleet.yaml", "demo-train-0042")
    assert proc.returncode == 1 and "not a node of fleet demo" in proc.stderr


def test_operator_cordon_is_recorded_and_never_acted_on_by_apply(cli: Cli) -> None:
    cli.ok("cordon", "fleet.yaml", "demo-train-0002", "--reason", "fan noise, ticket 42")
    [record] = [r for r in cli.audit() if r["action"] == "cordon"]
    assert record["operator"] is True and record["reason"] == "operator: fan noise, ticket 42"
    run = cli.ok("apply", "fleet.yaml", "--auto-approve")
    assert "No actions this run" in run.stdout, run.stdout
    assert "cordoned by an operator: fan noise, ticket 42" in run.stdout  # pending, says why
    assert cli.memory()["nodes"]["demo-train-0002"]["phase"] == ""
    assert "demo-train-0002" in cli.machines()


def test_cordon_needs_a_reason(cli: Cli) -> None:
    assert cli("cordon", "fleet.yaml", "demo-train-0002").returncode == 1  # argparse
    proc = cli("cordon", "fleet.yaml", "demo-train-0002", "--reason", " ")
    assert proc.returncode == 1 and "give a reason" in proc.stderr


def test_local_reboot_refuses_foreign_and_gone_machines(tmp_path: Path) -> None:
    provider = LocalProvider("sim", tmp_path)
    foreign = provider.launch_foreign("sim-1a", "sim-h100x8")
    boot = provider.read_machine(foreign.instance_id)["boot_id"]
    with pytest.raises(ProviderError) as info:
        provider.reboot([foreign])
    assert info.value.code == "ForeignInstance"
    assert provider.read_machine(foreign.instance_id)["boot_id"] == boot
    shutil.rmtree(provider.machine_dir(foreign.instance_id))  # gone (terminate refuses it)
    with pytest.raises(ProviderError) as info:
        provider.reboot([foreign])
    assert info.value.code == "NotFound"
