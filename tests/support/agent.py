"""The agent's configuration for a test node, written once: node train-0001 of fleet demo,
pool train, 8 fake GPUs, no metadata service, boot boot-a, its store, state file, kernel
log and faults file under tmp_path, keyed NODE_KEY_HEX."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from navarch.agent import AgentConfig

#: The agent tests' clock: the time a test's first check runs.
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

#: The node key of every test agent (hex; derive_node_key gives 32 bytes).
NODE_KEY_HEX = "5a" * 32


def node_fields(tmp_path: Path) -> dict[str, Any]:
    """The test node's identity as agent.yaml keys: node train-0001 of fleet demo, pool
    train, 8 fake GPUs, no metadata service, boot boot-a, its store under tmp_path, keyed
    NODE_KEY_HEX (its files are the caller's)."""
    return {
        "fleet": "demo",
        "pool": "train",
        "node": "train-0001",
        "store": f"file://{tmp_path}/store",
        "key": NODE_KEY_HEX,
        "gpus_per_node": 8,
        "fake_gpu": True,
        "boot_id": "boot-a",
        "metadata": "none",
    }


def agent_config(tmp_path: Path, **fields: Any) -> AgentConfig:
    """An AgentConfig for the test node (node_fields) whose files live under tmp_path;
    fields add to or replace those (None leaves a field at AgentConfig's own default)."""
    base: dict[str, Any] = {
        **node_fields(tmp_path),
        "state_file": str(tmp_path / "state" / "agent-state.json"),
        "kernel_log": str(tmp_path / "kern.log"),
        "faults_file": str(tmp_path / "faults.json"),
        "instance_id": "i-0123",
    }
    base.update(fields)
    return AgentConfig(**{k: v for k, v in base.items() if v is not None})
