"""What several benchmarks share: a real agent report to copy per node."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any


def report_template(
    directory: Path, fleet: str, gpus: int, kernel_lines: str = ""
) -> dict[str, Any]:
    """One real agent report (``run_once`` over fake GPUs, printed, not stored) of node
    <fleet>-template-0000 with ``gpus`` GPUs, without its signature; its state and kernel
    log files go to ``directory``, the kernel log holding ``kernel_lines`` (e.g. an XID
    line, for an unhealthy report)."""
    from navarch.agent import AgentConfig, run_once

    (directory / "kern.log").write_text(kernel_lines)
    config = AgentConfig(
        fleet=fleet,
        pool="template",
        node=f"{fleet}-template-0000",
        instance_id="i-0",
        store=f"file://{directory}/unused",
        key="00" * 32,
        gpus_per_node=gpus,
        state_file=str(directory / "agent.json"),
        kernel_log=str(directory / "kern.log"),
        fake_gpu=True,
        gpu_count=gpus,
        boot_id="boot-template",
        metadata="none",
    )
    with contextlib.redirect_stderr(io.StringIO()):
        report = run_once(config, to_stdout=True)
    report.pop("signature", None)
    return report
