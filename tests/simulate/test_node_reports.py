"""A simulated node's report is the shipped agent's: for the same GPU state and kernel log,
the bytes the simulator stores are the bytes `navarch agent run` writes on a machine."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.agent.config import AgentConfig
from navarch.agent.gpu import FakeFaults
from navarch.agent.runner import run_once
from navarch.report import signing
from navarch.simulate.node import SimAgent, xid_line
from navarch.simulate.store import MemoryStore
from navarch.stores.file import FileStore

SECRET = b"simulated-node-test-secret-0001"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class _Machine:
    """A node as `navarch agent run --once` sees it: agent.yaml's files on disk."""

    def __init__(self, root: Path, config: AgentConfig) -> None:
        self.root = root
        self.config = replace(
            config,
            state_file=str(root / "agent.json"),
            kernel_log=str(root / "kern.log"),
            faults_file=str(root / "faults.json"),
            notice_file=str(root / "notice.json"),
        )
        self.store = FileStore(root / "store")
        (root / "kern.log").write_text("")

    def log(self, line: str) -> None:
        with open(self.root / "kern.log", "a") as fh:
            fh.write(line + "\n")

    def faults(self, doc: dict) -> None:
        (self.root / "faults.json").write_text(json.dumps(doc))

    def notice(self, doc: dict) -> None:
        (self.root / "notice.json").write_text(json.dumps(doc))

    def reboot(self, boot_id: str) -> None:
        self.config = replace(self.config, boot_id=boot_id)
        (self.root / "kern.log").write_text("")

    def run(self, now: datetime) -> bytes:
        run_once(self.config, now=now, store=self.store)
        return self.store.get(self.config.report_key).data


def test_simulated_reports_are_byte_identical_to_the_agents(tmp_path: Path) -> None:
    key = signing.derive_node_key(SECRET, "demo", "demo-train-0001")
    config = AgentConfig(
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        store="mem://simulate",
        instance_id="i-00000001",
        key=key.hex(),
        gpus_per_node=8,
        state_file="memory",
        fake_gpu=True,
        gpu_count=8,
        boot_id="i-00000001-boot1",
        metadata="none",
    )
    now = T0
    sim_store = MemoryStore(lambda: now)
    sim = SimAgent(config)
    machine = _Machine(tmp_path, config)

    def both() -> bytes:
        sim.run(now, sim_store)
        ours = sim_store.get(config.report_key).data
        assert ours == machine.run(now)
        return ours

    first = json.loads(both())
    assert first["status"] == "healthy" and len(first["gpus"]) == 8

    now += timedelta(minutes=30)  # XID 79 on GPU 0: the driver's kernel log line
    sim.log_xid(79, 0, now)
    machine.log(xid_line(79, sim.pci_bus_id(0), now))
    report = json.loads(both())
    assert report["status"] == "unhealthy" and [x["code"] for x in report["xids"]] == [79]

    now += timedelta(minutes=30)  # latched: the XID is still in the next report
    assert [x["code"] for x in json.loads(both())["xids"]] == [79]

    now += timedelta(minutes=30)  # GPU 0 at its shutdown temperature, a spot notice
    sim.set_faults(FakeFaults(temperature_c={0: 95.0}))
    machine.faults({"temperature_c": {"0": 95.0}})
    notice = {
        "kind": "preemption",
        "source": "aws",
        "deadline": (now + timedelta(minutes=2)).isoformat(),
        "detail": "EC2 spot instance interruption notice",
    }
    sim.set_notice(notice)
    machine.notice(notice)
    report = json.loads(both())
    assert report["notice"]["kind"] == "preemption"
    assert any(c["name"] == "temperature" and c["status"] == "unhealthy" for c in report["checks"])

    now += timedelta(minutes=30)  # a reboot: new boot id, XIDs unlatched, the heat stays
    sim.reboot("i-00000001-boot2")
    machine.reboot("i-00000001-boot2")
    report = json.loads(both())
    assert report["boot_id"] == "i-00000001-boot2" and report["xids"] == []
    assert report["sequence"] > first["sequence"]
