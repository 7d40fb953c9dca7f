"""Prometheus text as tests read it: the samples of a textfile (prometheus_client's own
parser), and the node agent run once on fake GPUs to write one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.fake_agent import write_agent_yaml

#: A kernel-log line with XID 79 (GPU fallen off the bus) on the GPU at PCI 0000:18:00.
XID_79 = (
    "2026-03-01T11:58:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=0, "
    "name=python, GPU has fallen off the bus.\n"
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str, name_pattern: str) -> Samples:
    """{(sample name, sorted label pairs): value} of Prometheus text; every metric family's
    name must match name_pattern (a regular expression, anchored by the caller)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        assert re.match(name_pattern, family.name), family.name
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(got: Samples, name: str, **labels: str) -> float:
    """The value of the sample called name with exactly these labels (KeyError if none)."""
    return got[(name, tuple(sorted(labels.items())))]


def run_agent_with_xid_79(
    tmp_path: Path, *, fleet: str, node: str, textfile: Path, stdout: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `navarch agent run --once` on two fake GPUs in pool train, with XID 79 in its
    kernel log, writing its Prometheus textfile to textfile (and its report to stdout if
    asked); files under tmp_path."""
    (tmp_path / "kern.log").write_text(XID_79)
    config = write_agent_yaml(tmp_path, fleet=fleet, node=node, gpus_per_node=2)
    args = ["--config", str(config), "--kernel-log", str(tmp_path / "kern.log")]
    if stdout:
        args.append("--stdout")
    return subprocess.run(
        [sys.executable, "-m", "navarch", "agent", "run", "--once", *args]
        + ["--metrics-textfile", str(textfile)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NAVARCH_GPU_COUNT": "2"},
    )
