"""The agent's own textfile: `navarch agent run --once --metrics-textfile`
on fake GPUs with an XID 79 in the kernel log, read back with prometheus_client's parser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

XID_79 = (
    "2026-03-01T11:58:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=0, "
    "name=python, GPU has fallen off the bus.\n"
)


def test_agent_textfile_has_per_gpu_readings_and_xid_counts(tmp_path: Path) -> None:
    (tmp_path / "kern.log").write_text(XID_79)
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fleet": "demo",
                "pool": "train",
                "node": "demo-train-0001",
                "store": f"file://{tmp_path}/store",
                "key": "5a" * 32,
                "gpus_per_node": 2,
                "fake_gpu": True,
                "metadata": "none",
                "state_file": str(tmp_path / "state.json"),
                "boot_id": "boot-a",
            }
        )
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "navarch",
            "agent",
            "run",
            "--once",
            "--config",
            str(config),
            "--kernel-log",
            str(tmp_path / "kern.log"),
            "--stdout",
            "--metrics-textfile",
            str(tmp_path / "agent.prom"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NAVARCH_GPU_COUNT": "2"},
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    text = (tmp_path / "agent.prom").read_text()
    samples = {}
    for family in text_string_to_metric_families(text):
        assert re.match(r"^navarch_node_[a-z_]+$", family.name), family.name
        for s in family.samples:
            samples[
                (
                    s.name,
                    s.labels.get("gpu"),
                    s.labels.get("code"),
                    s.labels.get("type"),
                    s.labels.get("status"),
                )
            ] = s.value
    gpus = report["gpus"]
    assert len(gpus) == 2
    for g in gpus:
        i = str(g["index"])
        assert (
            samples[("navarch_node_gpu_temperature_celsius", i, None, None, None)]
            == g["temperature_c"]
        )
        assert samples[("navarch_node_gpu_power_watts", i, None, None, None)] == g["power_w"]
        assert (
            samples[("navarch_node_gpu_memory_used_bytes", i, None, None, None)]
            == g["memory_used_bytes"]
        )
        assert (
            samples[("navarch_node_gpu_utilization_ratio", i, None, None, None)]
            == g["utilization_pct"] / 100
        )
        assert samples[("navarch_node_gpu_ecc_errors_total", i, None, "uncorrected", None)] == 0
    xid_gpu = next(str(g["index"]) for g in gpus if g["pci_bus_id"].lower() == "0000:18:00")
    assert samples[("navarch_node_gpu_xid_errors_total", xid_gpu, "79", None, None)] == 1
    assert samples[("navarch_node_health_score", None, None, None, None)] == report["health_score"]
    assert samples[("navarch_node_health_status", None, None, None, "unhealthy")] == 1
    assert samples[("navarch_node_health_status", None, None, None, "healthy")] == 0
