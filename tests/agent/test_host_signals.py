"""Host signals in the kernel log: a soft lockup line becomes a host_cpu fault; noise does not.

The soft-lockup lines follow kernel/watchdog.c's format string
``pr_emerg("BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]\\n", ...)`` behind its pr_fmt
``"watchdog: "`` (composed lines: CPU, seconds, task and pid are ours).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.agent.kernel_log import parse_host_signals, split_prefix
from navarch.fleet.remedies import FaultClass, fault_class

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LOCKUP = "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:12345]"


@pytest.mark.parametrize(
    "raw",
    [
        LOCKUP,
        f"[ 8123.456789] {LOCKUP}",
        f"Mar  1 11:59:58 gpu-node-7 kernel: [ 8123.456789] {LOCKUP}",
        # Before pr_fmt (kernels before 4.x printed it with KERN_ERR and no prefix).
        "BUG: soft lockup - CPU#3 stuck for 23s! [python3:12345]",
    ],
)
def test_a_soft_lockup_line_names_the_cpu_task_and_time_stuck(raw: str) -> None:
    (signal,) = parse_host_signals([split_prefix(raw)])
    assert signal.kind == "soft_lockup"
    assert fault_class(signal.kind) is FaultClass.HOST_CPU
    assert dict(signal.evidence) == {"cpu": 3, "stuck_s": 23, "task": "python3", "pid": 12345}


@pytest.mark.parametrize(
    "raw",
    [
        # An audit record quoting the words (an operator grepping for them).
        "audit: type=1105 msg='cmd=\"grep BUG: soft lockup - CPU#3 stuck for 23s! [x:1]\"'",
        "python3[4242]: segfault at 0 ip 00007f error 4 in libc.so.6",
        "watchdog: watchdog0: watchdog did not stop!",
        "NMI watchdog: Watchdog detected hard LOCKUP on cpu 5",
    ],
)
def test_noise_that_quotes_or_resembles_a_lockup_is_no_host_signal(raw: str) -> None:
    assert parse_host_signals([split_prefix(raw)]) == []


def test_the_agent_reports_a_soft_lockup_as_an_unhealthy_host_cpu_fault_recommending_reboot(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config()
    with open(str(cfg.kernel_log), "a") as fh:
        fh.write(f"[ 8123.456789] {LOCKUP}\n")
    report = run_once(cfg, now=T0)
    (check,) = [c for c in report["checks"] if c["name"] == "host_signal"]
    assert (check["status"], check["action"]) == ("unhealthy", "reboot")
    assert check["fault_key"]["kind"] == "soft_lockup"
    assert LOCKUP in check["message"]
    assert report["status"] == "unhealthy"
