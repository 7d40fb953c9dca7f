"""The agent's own textfile: `navarch agent run --once --metrics-textfile`
on fake GPUs with an XID 79 in the kernel log, read back with prometheus_client's parser."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.metrics import run_agent_with_xid_79, samples, value


def test_agent_textfile_has_per_gpu_readings_and_xid_counts(tmp_path: Path) -> None:
    run = run_agent_with_xid_79(
        tmp_path,
        fleet="demo",
        node="demo-train-0001",
        textfile=tmp_path / "agent.prom",
        stdout=True,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    got = samples((tmp_path / "agent.prom").read_text(), r"^navarch_node_[a-z_]+$")
    node = {"fleet": "demo", "pool": "train", "node": "demo-train-0001"}
    gpus = report["gpus"]
    assert len(gpus) == 2
    per_gpu = {
        str(g["index"]): {
            **node,
            "gpu": str(g["index"]),
            "uuid": g["uuid"],
            "pci_bus_id": g["pci_bus_id"],
        }
        for g in gpus
    }
    for g in gpus:
        on = per_gpu[str(g["index"])]
        assert value(got, "navarch_node_gpu_temperature_celsius", **on) == g["temperature_c"]
        assert value(got, "navarch_node_gpu_power_watts", **on) == g["power_w"]
        assert value(got, "navarch_node_gpu_memory_used_bytes", **on) == g["memory_used_bytes"]
        assert value(got, "navarch_node_gpu_utilization_ratio", **on) == g["utilization_pct"] / 100
        assert value(got, "navarch_node_gpu_ecc_errors_total", **on, type="uncorrected") == 0
    xid_gpu = next(str(g["index"]) for g in gpus if g["pci_bus_id"].lower() == "0000:18:00")
    assert value(got, "navarch_node_gpu_xid_errors_total", **per_gpu[xid_gpu], code="79") == 1
    assert value(got, "navarch_node_health_score", **node) == report["health_score"]
    assert value(got, "navarch_node_health_status", **node, status="unhealthy") == 1
    assert value(got, "navarch_node_health_status", **node, status="healthy") == 0
