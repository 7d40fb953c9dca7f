"""The GitOps kit in examples/, each checked by the validator its
platform would use: GitHub Actions and GitLab CI files against the schemastore schemas
check-jsonschema vendors (offline), the Kubernetes manifests with kubernetes-validate's
offline schemas (strict), the systemd units with `systemd-analyze verify`. Each validator
is also shown to reject a broken copy, so a pass means something."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from tests.support.cli import run_navarch
from tests.support.system import require_system_package

if TYPE_CHECKING:
    from click.testing import Result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A console script installed beside this Python (pip's dev extra), else on PATH."""
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def check_jsonschema(schema: str, *files: Path) -> Result:
    """`check-jsonschema --builtin-schema SCHEMA FILES`: the command its console script runs,
    in this process (it keeps no state between runs), which skips a process start of about
    half a second of CPU. result.exit_code is the command's; a crash is result.exception."""
    from check_jsonschema import main
    from click.testing import CliRunner

    return CliRunner().invoke(main, ["--builtin-schema", schema, *map(str, files)])


def rejected(result: Result) -> bool:
    """check-jsonschema said no (exit status 1 from the command), rather than crashed."""
    return result.exit_code != 0 and isinstance(result.exception, SystemExit)


def kubernetes_validate(*files: Path) -> subprocess.CompletedProcess[str]:
    """`kubernetes-validate --strict FILES` in a process of its own: it adds a constructor to
    PyYAML's SafeLoader, which every test in this process shares."""
    return subprocess.run(
        [tool("kubernetes-validate"), "--strict", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", ["navarch-plan.yml", "navarch-apply.yml"])
def test_github_workflow_is_valid(name: str) -> None:
    res = check_jsonschema("vendor.github-workflows", EXAMPLES / "github" / name)
    assert res.exit_code == 0, res.output


def test_github_workflows_do_what_docs_say() -> None:
    plan = yaml.safe_load((EXAMPLES / "github/navarch-plan.yml").read_text())
    apply = yaml.safe_load((EXAMPLES / "github/navarch-apply.yml").read_text())
    plan_steps = plan["jobs"]["plan"]["steps"]
    assert any(
        "--markdown" in s.get("run", "") and "--detailed-exitcode" in s.get("run", "")
        for s in plan_steps
    )
    sticky = [s for s in plan_steps if "sticky-pull-request-comment" in s.get("uses", "")]
    assert len(sticky) == 1 and sticky[0]["with"]["header"]  # one comment, updated in place
    for doc in (plan, apply):
        assert doc["permissions"]["id-token"] == "write"  # OIDC, no long-lived keys
        text = yaml.safe_dump(doc)
        assert "AWS_SECRET_ACCESS_KEY" not in text and "aws-secret-access-key" not in text
    assert apply["concurrency"]["cancel-in-progress"] is False
    assert "fleet" in apply["concurrency"]["group"]
    assert apply[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads `on:` as True


def test_broken_workflow_is_rejected(tmp_path: Path) -> None:
    doc = yaml.safe_load((EXAMPLES / "github/navarch-apply.yml").read_text())
    doc["jobs"]["apply"]["runs-on"] = {"not": "a runner"}
    doc["jobs"]["apply"]["timeout-minutes"] = "soon"
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(doc).replace("true:", "on:", 1))
    assert rejected(check_jsonschema("vendor.github-workflows", bad))


def test_gitlab_ci_is_valid(tmp_path: Path) -> None:
    res = check_jsonschema("vendor.gitlab-ci", EXAMPLES / "gitlab/.gitlab-ci.yml")
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((EXAMPLES / "gitlab/.gitlab-ci.yml").read_text())
    assert doc["navarch-apply"]["resource_group"]  # one apply per fleet at a time
    bad = tmp_path / ".gitlab-ci.yml"
    doc["navarch-apply"]["when"] = "sometimes"
    bad.write_text(yaml.safe_dump(doc))
    assert rejected(check_jsonschema("vendor.gitlab-ci", bad))


def test_kubernetes_cronjob_is_valid(tmp_path: Path) -> None:
    manifest = EXAMPLES / "kubernetes/cronjob.yaml"
    res = kubernetes_validate(manifest)
    assert res.returncode == 0, res.stdout + res.stderr
    docs = list(yaml.safe_load_all(manifest.read_text()))
    cron = next(d for d in docs if d["kind"] == "CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["startingDeadlineSeconds"] > 0
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert "eks.amazonaws.com/role-arn" in sa["metadata"]["annotations"]
    assert "iam.gke.io/gcp-service-account" in sa["metadata"]["annotations"]
    # The embedded fleet.yaml is a valid fleet.
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    (tmp_path / "fleet.yaml").write_text(config["data"]["fleet.yaml"])
    run = run_navarch(["validate", "fleet.yaml"], cwd=tmp_path, env={"NAVARCH_FLEET_SECRET": "x"})
    assert run.returncode == 0, run.stderr
    # And the validator bites.
    cron["spec"]["concurrencyPolicy"] = "Sometimes"
    cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    assert kubernetes_validate(bad).returncode != 0


@pytest.mark.system
def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    require_system_package("systemd", "systemd-analyze")
    # verify checks that ExecStart's program exists: point it at this install's navarch.
    navarch = tool("navarch")
    service = (EXAMPLES / "systemd/navarch-reconcile.service").read_text()
    assert "ExecStart=/usr/local/bin/navarch apply " in service and "--auto-approve" in service
    (tmp_path / "navarch-reconcile.service").write_text(
        service.replace("/usr/local/bin/navarch", navarch)
    )
    shutil.copy(EXAMPLES / "systemd/navarch-reconcile.timer", tmp_path)
    res = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(tmp_path / "navarch-reconcile.service"),
            str(tmp_path / "navarch-reconcile.timer"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
    (tmp_path / "navarch-reconcile.timer").write_text(
        (tmp_path / "navarch-reconcile.timer")
        .read_text()
        .replace("OnUnitActiveSec=5min", "OnUnitActiveSec=often")
    )
    res = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(tmp_path / "navarch-reconcile.service"),
            str(tmp_path / "navarch-reconcile.timer"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 or res.stderr.strip(), "systemd-analyze accepted a bad timer"
