"""`navarch agent run --once --stdout` is a look at the node: it prints the report and
writes nothing, neither to the store nor to the agent's state file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.fake_agent import write_agent_yaml

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _run(cfg: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "navarch", "agent", "run", "--once", "--config", str(cfg), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_stdout_prints_the_report_and_writes_nothing(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    (node_dir / "kern.log").write_text("")
    cfg = write_agent_yaml(
        tmp_path,
        node="demo-train-0001",
        store=f"file://{node_dir}/store",
        state_file=str(node_dir / "state" / "agent-state.json"),
        kernel_log=str(node_dir / "kern.log"),
        instance_id="i-0123",
    )
    before = _tree(node_dir)
    run = _run(cfg, "--stdout")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["node"] == "demo-train-0001"
    assert _tree(node_dir) == before

    assert _run(cfg).returncode == 0  # a real run writes the state and the report
    after = _tree(node_dir)
    assert "state/agent-state.json" in after
    assert "store/health/demo/train/demo-train-0001.json" in after
