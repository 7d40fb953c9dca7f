"""The remediation ladder's reboot against moto: an XID 79 node is cordoned,
drained and rebooted through EC2 RebootInstances (called once), never TerminateInstances,
and returns to service after return_after healthy reports from its new boot."""

from __future__ import annotations

import json
import time

import boto3

from navarch import cli
from navarch.providers import aws as awsmod
from navarch.providers.local.ops import _gpu_bdf
from navarch.report.xid import lookup
from tests.aws.test_e2e import (  # noqa: F401 - env is a fixture
    BUCKET,
    FLEET,
    env,
    fleet_nodes,
    s3_report,
    write_fleet,
)


def _xid_line(node: str, xid: int) -> str:
    """The kernel log line of `xid` on the node's one GPU (the local provider's bus id)."""
    return (
        f"[100.000000] NVRM: Xid (PCI:{_gpu_bdf(node, 1, 0)}): {xid}, pid='<unknown>', "
        f"name=<unknown>, {lookup(xid).meaning}"
    )


def test_xid79_reboots_through_reboot_instances_never_terminates(
    env, tmp_path, monkeypatch, capsys
) -> None:  # noqa: F811
    calls: list[str] = []

    def record(operation: str):  # noqa: ANN202 - a botocore event handler
        def handler(params, **kwargs) -> None:  # noqa: ANN001, ANN003
            calls.append(operation)

        return handler

    monkeypatch.setattr(
        awsmod,
        "CLIENT_EVENT_HANDLERS",
        [
            ("before-call.ec2.RebootInstances", record("RebootInstances")),
            ("before-call.ec2.TerminateInstances", record("TerminateInstances")),
        ],
    )
    fleet = write_fleet(tmp_path, target=1, max_nodes=1)
    text = fleet.read_text().replace(
        "      boot_timeout: 1h\n",
        "      boot_timeout: 1h\n      replacement: after-terminate\n      return_after: 2\n",
    )
    fleet.write_text(text)
    apply = ["apply", str(fleet), "--auto-approve"]
    assert cli.main(apply) == 0
    [(node, iid)] = fleet_nodes().items()
    assert s3_report(node, tmp_path, instance_id=iid, boot_id="boot-a")["status"] == "healthy"
    assert cli.main(apply) == 0

    assert (
        s3_report(
            node, tmp_path, instance_id=iid, boot_id="boot-a", kernel_lines=[_xid_line(node, 79)]
        )["status"]
        == "unhealthy"
    )
    assert cli.main(apply) == 0  # cordon + drain
    capsys.readouterr()
    # Drained once a report made after the drain began shows no GPU processes; S3 keeps
    # modification times to the second, so a report in the drain's own second does not
    # count: the first report is made in a later second (five quick tries could all fall
    # in the drain's second).
    time.sleep(1.1)
    out = ""
    for _ in range(5):
        s3_report(node, tmp_path, instance_id=iid, boot_id="boot-a")
        assert cli.main(apply) == 0
        out = capsys.readouterr().out
        if f"~ reboot {node}" in out:
            break
    assert f"~ reboot {node}" in out, out
    assert calls == ["RebootInstances"]

    for _ in range(2):  # return_after 2 healthy reports from the new boot
        assert s3_report(node, tmp_path, instance_id=iid, boot_id="boot-b")["status"] == "healthy"
        assert cli.main(apply) == 0
    out = capsys.readouterr().out
    assert f"~ uncordon {node}" in out and "healthy for 2 reports after reboot" in out, out
    assert calls == ["RebootInstances"]  # once, and no TerminateInstances
    assert fleet_nodes() == {node: iid}
    state = json.loads(
        boto3.client("s3")
        .get_object(Bucket=BUCKET, Key=f"navarch/state/{FLEET}.json")["Body"]
        .read()
    )
    assert state["nodes"][node]["phase"] == ""
    assert state["nodes"][node]["rung"] == "reboot"
