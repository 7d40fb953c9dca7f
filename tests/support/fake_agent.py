"""An agent.yaml for a fake-GPU node whose acceptance tools answer from given overrides
(FakeToolHost's keys), for tests that run the agent's own commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def fake_agent_config(
    tmp_path: Path, overrides: dict[str, Any], *, fleet: str = "demo", node: str = "train-0001"
) -> Path:
    """Write acceptance.json (the overrides) and agent.yaml (pool train, 8 fake GPUs, no
    metadata service, an NCCL floor of 200 GB/s) under tmp_path -> agent.yaml's path."""
    answers = tmp_path / "acceptance.json"
    answers.write_text(json.dumps(overrides))
    doc = {
        "fleet": fleet,
        "pool": "train",
        "node": node,
        "store": f"file://{tmp_path}/store",
        "key": "5a" * 32,
        "gpus_per_node": 8,
        "fake_gpu": True,
        "metadata": "none",
        "state_file": str(tmp_path / "state.json"),
        "acceptance": {"nccl_min_busbw_gbps": 200.0},
        "acceptance_file": str(answers),
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
