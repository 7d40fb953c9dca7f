"""The agent on a fake-GPU node, for tests: an agent.yaml whose acceptance tools answer
from given overrides (FakeToolHost's keys), for tests that run the agent's own commands;
and one real agent run whose signed report lands in a fleet's store, for the end-to-end
tests of every cloud."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from navarch.agent import run_once
from navarch.report.signing import derive_node_key
from tests.support.agent import agent_config, node_fields


def ecc_uncorrected(count: int) -> dict[str, Any]:
    """The fake GPU backend's faults document: GPU 0's volatile uncorrected ECC count."""
    return {"ecc_uncorrected": {"0": count}}


def agent_report(
    store: str,
    node: str,
    tmp_path: Path,
    *,
    fleet: str,
    secret: str,
    instance_id: str | None = None,
    boot_id: str | None = None,
    faults: Mapping[str, Any] | None = None,
    kernel_lines: Sequence[str] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    """Run the real agent once for `node` of pool train (one fake GPU) and write its report,
    signed with the node key derived from the fleet secret, to the store at URL `store`
    -> the report.

    instance_id defaults to node, boot_id to boot-<node>; faults is the fake backend's
    faults file (e.g. ecc_uncorrected(3), {"gpu_lost": [0]}); kernel_lines are appended to
    this boot's kernel log first (it keeps what earlier runs of the boot were given); now
    defaults to the system clock. The agent's files live under tmp_path, named by node.
    """
    boot = boot_id or f"boot-{node}"
    faults_file = tmp_path / f"{node}.faults.json"
    faults_file.write_text(json.dumps(dict(faults or {})))
    kernel_log = tmp_path / f"{node}.{boot}.kern.log"
    if kernel_lines:
        with open(kernel_log, "a") as fh:
            fh.writelines(line + "\n" for line in kernel_lines)
    config = agent_config(
        tmp_path,
        fleet=fleet,
        node=node,
        instance_id=instance_id or node,
        store=store,
        key=derive_node_key(secret.encode(), fleet, node).hex(),
        gpus_per_node=1,
        state_file=str(tmp_path / f"{node}.agent.json"),
        kernel_log=str(kernel_log),
        gpu_count=1,
        faults_file=str(faults_file),
        boot_id=boot,
    )
    return run_once(config, now=now)


def write_agent_yaml(tmp_path: Path, **fields: Any) -> Path:
    """Write tmp_path/agent.yaml for node train-0001 of fleet demo, pool train: 8 fake
    GPUs, no metadata service, boot boot-a, its store and state file under tmp_path, keyed
    NODE_KEY_HEX; fields add to or replace those keys (None leaves a key out) -> agent.yaml's
    path."""
    doc: dict[str, Any] = {
        **node_fields(tmp_path),
        "state_file": str(tmp_path / "state.json"),
        **fields,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    return path


def fake_agent_config(
    tmp_path: Path, overrides: dict[str, Any], *, fleet: str = "demo", node: str = "train-0001"
) -> Path:
    """Write acceptance.json (the overrides) and agent.yaml (write_agent_yaml's, with an
    NCCL floor of 200 GB/s) under tmp_path -> agent.yaml's path."""
    answers = tmp_path / "acceptance.json"
    answers.write_text(json.dumps(overrides))
    return write_agent_yaml(
        tmp_path,
        fleet=fleet,
        node=node,
        boot_id=None,
        acceptance={"nccl_min_busbw_gbps": 200.0},
        acceptance_file=str(answers),
    )
