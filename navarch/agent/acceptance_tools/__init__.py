"""The node's acceptance tools: the programs and files an acceptance reads, their parsers, and one
function per acceptance test.

::

    host.py         ToolHost: run an argv, read a file, list a directory (SystemToolHost)
    fake.py         FakeToolHost: the tools' real output formats from a dict of overrides
    dcgm.py         dcgmi diag -r LEVEL -j        (also read by navarch.remote.diagnostics)
    nvbandwidth.py  nvbandwidth matrices and SUM lines
    nccl.py         nccl-tests all_reduce_perf table and footer
    smi.py          nvidia-smi -q -x: GPUs, memory, ECC, persistence, versions
    sysfs.py        PCIe links, InfiniBand/EFA ports, NIC firmware
    thresholds.py   published per-instance-type baselines and which floor a test uses
    instance_type.py  the node's instance type from the cloud's metadata service
    suite.py        run_<test>(policy, host) -> AcceptanceResult; TOOL_TESTS; run_tool_tests

The words (AcceptancePolicy, AcceptanceResult, AcceptanceTest, ...) are navarch.report.acceptance's.
Shipped in the agent bundle: Python 3.9 and the standard library only. docs/acceptance.md
says what each test proves, its time, its threshold and its source.
"""

from __future__ import annotations

from navarch.agent.acceptance_tools.fake import FakeToolHost
from navarch.agent.acceptance_tools.host import SystemToolHost, ToolHost, ToolOutput
from navarch.agent.acceptance_tools.suite import TOOL_TESTS, run_tool_tests

__all__ = [
    "TOOL_TESTS",
    "FakeToolHost",
    "SystemToolHost",
    "ToolHost",
    "ToolOutput",
    "run_tool_tests",
]
