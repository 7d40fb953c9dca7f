"""The deploy files of event-started runs (examples/events/, examples/kubernetes/,
examples/systemd/): each checked by its platform's validator where one runs offline, and
each one's navarch command line parsed by navarch's own parser."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from navarch.cli import build_parser
from tests.support.system import require_system_package
from tests.unattended.test_examples import EXAMPLES, kubernetes_validate, tool

REPO = EXAMPLES.parent


def parses(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command == "apply" and args.on_events and args.auto_approve


def test_the_listening_deployment_is_valid_and_runs_one_listener() -> None:
    manifest = EXAMPLES / "kubernetes/events-deployment.yaml"
    res = kubernetes_validate(manifest)
    assert res.returncode == 0, res.stdout + res.stderr
    (deploy,) = yaml.safe_load_all(manifest.read_text())
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    parses(args)
    assert "--listen" in args


def test_the_cloud_run_job_runs_triggered_on_a_pubsub_subscription() -> None:
    (job,) = yaml.safe_load_all((EXAMPLES / "events/gcp-cloud-run/job.yaml").read_text())
    spec = job["spec"]["template"]["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    parses(args)
    assert "--triggered" in args
    assert any(a.startswith("--on-events=pubsub://projects/") for a in args)
    assert spec["timeoutSeconds"] < 600  # below the subscription's ack deadline


def test_the_lambda_template_names_the_handler_and_its_policy_allows_the_queue() -> None:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: f"!{suffix}")
    template = yaml.load((EXAMPLES / "events/aws-lambda/template.yaml").read_text(), Loader)
    fn = template["Resources"]["NavarchEvents"]["Properties"]
    assert fn["Handler"] == "navarch.events.aws_lambda_handler"
    assert fn["Timeout"] < 600  # below the queue's visibility timeout
    assert fn["Events"]["Reports"]["Type"] == "SQS"
    import navarch.events

    assert callable(navarch.events.aws_lambda_handler)
    policy = json.loads((EXAMPLES / "events/aws-lambda/policy.json").read_text())
    actions = {
        a
        for s in policy["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} <= actions
    assert {"s3:GetObject", "s3:PutObject", "ec2:RunInstances"} <= actions


def test_the_azure_function_parses_and_uses_the_front_door() -> None:
    source = (EXAMPLES / "events/azure-function/function_app.py").read_text()
    tree = ast.parse(source)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {"navarch", "navarch.events.messages"} <= imported
    assert not any(m.startswith(("navarch.reconcile", "navarch.planner")) for m in imported)
    host = json.loads((EXAMPLES / "events/azure-function/host.json").read_text())
    assert host["extensions"]["queues"]["batchSize"] == 1


def test_the_cronjob_comment_and_the_service_give_commands_navarch_parses() -> None:
    service = (EXAMPLES / "systemd/navarch-events.service").read_text()
    line = next(x for x in service.splitlines() if x.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))[1:]
    parses([a.replace("${NAVARCH_EVENTS_QUEUE}", "https://sqs.x/1/q") for a in argv])
    assert "--on-events" in (EXAMPLES / "kubernetes/cronjob.yaml").read_text()


@pytest.mark.system
def test_the_events_service_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    require_system_package("systemd", "systemd-analyze")
    service = (EXAMPLES / "systemd/navarch-events.service").read_text()
    unit = tmp_path / "navarch-events.service"
    unit.write_text(service.replace("/usr/local/bin/navarch", tool("navarch")))
    (tmp_path / "navarch.env").write_text("NAVARCH_EVENTS_QUEUE=https://sqs.x/1/q\n")
    unit.write_text(
        unit.read_text().replace("/etc/navarch/navarch.env", str(tmp_path / "navarch.env"))
    )
    res = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
