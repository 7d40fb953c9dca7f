"""A missing secret, hostile reports, clock skew and bad input through the CLI, as a
subprocess on the local provider."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

STORE_HEALTH = ".navarch/store/health/demo"


def _at(minutes: int) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(navarch, name: str) -> dict:
    return next(n for n in navarch.nodes() if n["node"] == name)


# -- item 4 --------------------------------------------------------------------------------
def test_hostile_reports_are_counted_in_status_not_a_traceback(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    health = navarch.workdir / STORE_HEALTH / "train"
    (health / "demo-train-0001.json").write_bytes(b"[" * 100_000)
    good = json.loads((health / "demo-train-0002.json").read_text())
    good["checks"] = [{"name": "x", "status": "degraded", "action": "none", "message": "\ud800"}]
    (health / "demo-train-0002.json").write_text(json.dumps(good))  # "\\ud800" escape
    plan = navarch("plan", "fleet.yaml")
    assert plan.code == 0 and "Traceback" not in plan.err, plan.err
    status = navarch.status()
    assert status["rejections"] == {"malformed": 2}
    assert {_node(navarch, n)["rejected"] for n in ("demo-train-0001", "demo-train-0002")} == {
        "malformed"
    }
    text = navarch.ok("status", "fleet.yaml").out
    assert "Rejected reports (all time): malformed=2" in text


# -- item 5 --------------------------------------------------------------------------------
def test_node_clock_lagging_11_minutes_is_not_cordoned(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    # The agents' clocks run 11 minutes late; the store stamps each object with its own time.
    navarch.ok("local", "tick", "fleet.yaml", "--agent-clock-skew=-660")
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 0, plan.out + plan.err
    assert "cordon" not in plan.out
    node = _node(navarch, "demo-train-0001")
    assert node["lifecycle"] == "healthy"
    assert "clock skew: node clock 11m" in node["reason"] and "behind" in node["reason"]
    assert -700 < node["clock_skew_s"] < -600
    assert "clock skew" in navarch.ok("status", "fleet.yaml", "--all").out


def test_node_clock_10_minutes_ahead_is_not_rejected_as_future(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml", "--agent-clock-skew=600")
    status = navarch.status()
    assert status["rejections"] == {}
    node = _node(navarch, "demo-train-0002")
    assert node["lifecycle"] == "healthy" and node["rejected"] is None
    assert "ahead of the store's" in node["reason"]
    assert "cordon" not in navarch.ok("plan", "fleet.yaml").out


# -- item 3 --------------------------------------------------------------------------------
def _set_secret(fleet_dir, secret_line: str) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    assert "  file: .navarch/fleet.secret\n" in text
    path.write_text(text.replace("secret:\n  file: .navarch/fleet.secret\n", secret_line))


def test_missing_secret_env_fails_plan_apply_and_status(navarch, fleet_dir):
    _set_secret(fleet_dir, "secret: {env: DEMO_FLEET_SECRET}\n")
    for args in (
        ("plan", "fleet.yaml"),
        ("apply", "fleet.yaml", "--auto-approve"),
        ("status", "fleet.yaml"),
    ):
        run = navarch(*args)
        assert run.code == 1, (args, run.out, run.err)
        assert "DEMO_FLEET_SECRET" in run.err and "secret.env" in run.err
        assert "Traceback" not in run.err
    assert not (fleet_dir / ".navarch/local/demo/machines").exists()  # nothing launched
    ok = navarch("plan", "fleet.yaml", env={"DEMO_FLEET_SECRET": "s" * 32})
    assert ok.code == 0, ok.err


def test_a_fleet_whose_secret_is_lost_can_still_be_destroyed(navarch, fleet_dir):
    _set_secret(fleet_dir, "secret: {env: DEMO_FLEET_SECRET}\n")
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env={"DEMO_FLEET_SECRET": "s" * 32})
    run = navarch("destroy", "fleet.yaml", "--force", "--auto-approve")
    assert run.code == 0, run.out + run.err
    assert not list((fleet_dir / ".navarch/local/demo/machines").iterdir())


def test_unreadable_secret_file_fails_naming_the_file(navarch, fleet_dir):
    (fleet_dir / ".navarch/fleet.secret").mkdir(parents=True)  # not a readable file
    run = navarch("plan", "fleet.yaml")
    assert run.code == 1
    assert "fleet.secret" in run.err and "secret.file" in run.err


def test_every_report_rejected_for_one_reason_is_a_fleet_error(navarch, fleet_dir):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    (fleet_dir / ".navarch/fleet.secret").write_text("a-different-secret-0123456789abcdef\n")
    plan = navarch("plan", "fleet.yaml")
    line = "every node's health report is rejected (bad_signature, 5 of 5 nodes)"
    assert line in plan.err
    status = navarch("status", "fleet.yaml")
    assert line in status.err
    assert line in navarch.status()["error"]
    # The local agents derive their key from the secret file at each tick: their next
    # reports verify again, and one node's bad report is that node's problem only.
    navarch.ok("local", "tick", "fleet.yaml")
    (fleet_dir / STORE_HEALTH / "train/demo-train-0001.json").write_bytes(b"{}")
    status = navarch.status()
    assert status["error"] is None and status["rejections"]["unsigned"] == 1


# -- item 13 -------------------------------------------------------------------------------
def _edit_yaml(fleet_dir, mutate) -> None:
    import yaml

    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_render_cloud_init_defaults_to_the_pools_first_node_name(navarch, fleet_dir):
    from navarch.report import signing

    navarch.ok("local", "tick", "fleet.yaml")  # acts, so creates the local fleet secret
    out = navarch.ok("render", "cloud-init", "fleet.yaml", "--pool", "train", "--reveal-key").out
    secret = (fleet_dir / ".navarch/fleet.secret").read_text().strip().encode()
    key = signing.derive_node_key(secret, "demo", "demo-train-0001").hex()
    assert 'node: "demo-train-0001"' in out and key in out
    assert 'node: "train-0001"' not in out


def test_render_cloud_init_prints_a_placeholder_for_the_node_key_unless_reveal_key(
    navarch, fleet_dir
):
    import yaml

    from navarch.agent.bootstrap import KEY_PLACEHOLDER
    from navarch.report import signing

    navarch.ok("local", "tick", "fleet.yaml")  # acts, so creates the local fleet secret
    secret = (fleet_dir / ".navarch/fleet.secret").read_text().strip().encode()
    key = signing.derive_node_key(secret, "demo", "demo-train-0002").hex()
    run = navarch.ok(
        "render", "cloud-init", "fleet.yaml", "--pool", "train", "--node", "demo-train-0002"
    )
    assert key not in run.out and key not in run.err
    assert "--reveal-key prints it" in run.err
    files = {f["path"]: f["content"] for f in yaml.safe_load(run.out)["write_files"]}
    assert yaml.safe_load(files["/etc/navarch/agent.yaml"])["key"] == KEY_PLACEHOLDER
    (fleet_dir / "user-data.yaml").write_text(run.out)
    if shutil.which("cloud-init"):  # the placeholder keeps the user-data valid cloud-init
        schema = subprocess.run(
            ["cloud-init", "schema", "--config-file", str(fleet_dir / "user-data.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert schema.returncode == 0, schema.stdout + schema.stderr
    revealed = navarch.ok(
        "render",
        "cloud-init",
        "fleet.yaml",
        "--pool",
        "train",
        "--node",
        "demo-train-0002",
        "--reveal-key",
    )
    assert key in revealed.out


def test_playbook_path_typo_fails_validate(navarch, fleet_dir):
    (fleet_dir / "broken.yaml").write_text("playbooks: [not, a, mapping]\n")
    _edit_yaml(
        fleet_dir,
        lambda d: d["pools"]["train"].update(
            playbooks={"cordon": "playbooks/cordn.yaml", "drain": "broken.yaml"}
        ),
    )
    run = navarch("validate", "fleet.yaml")
    assert run.code == 1, run.out + run.err
    lines = (fleet_dir / "fleet.yaml").read_text().splitlines()
    cordon_line = next(i for i, t in enumerate(lines, 1) if "cordn.yaml" in t)
    drain_line = next(i for i, t in enumerate(lines, 1) if "broken.yaml" in t)
    assert (
        f"fleet.yaml:{cordon_line}: pools.train.playbooks.cordon: playbook file "
        f"{fleet_dir / 'playbooks/cordn.yaml'} does not exist"
    ) in run.err
    assert (
        f"fleet.yaml:{drain_line}: pools.train.playbooks.drain: playbook does not load" in run.err
    )
    assert "2 problems found" in run.err


def test_validate_reports_every_schema_error(navarch, fleet_dir):
    def break_three(d) -> None:
        d["colour"] = "blue"
        d["pools"]["train"]["capacity"] = "cheap"
        d["pools"]["infer"]["gpus_per_node"] = "one"

    _edit_yaml(fleet_dir, break_three)
    lines = (fleet_dir / "fleet.yaml").read_text().splitlines()

    def line_of(text: str) -> int:
        return next(i for i, t in enumerate(lines, 1) if text in t)

    run = navarch("validate", "fleet.yaml")
    assert run.code == 1
    errors = [e for e in run.err.splitlines() if e.startswith("Error: ")]
    assert len(errors) == 3, run.err
    assert f"fleet.yaml:{line_of('capacity: cheap')}: pools.train.capacity:" in errors[0]
    assert f"fleet.yaml:{line_of('gpus_per_node: one')}: pools.infer.gpus_per_node:" in errors[1]
    assert f"fleet.yaml:{line_of('colour: blue')}: colour: unknown key 'colour'" in errors[2]


def test_bad_navarch_now_is_a_one_line_error(navarch):
    run = navarch("plan", "fleet.yaml", env={"NAVARCH_NOW": "yesterday"})
    assert run.code == 1
    assert "Traceback" not in run.err and len(run.err.strip().splitlines()) == 1
    assert "NAVARCH_NOW='yesterday' is not an RFC 3339 time" in run.err


def test_local_inject_without_a_fault_exits_1_with_usage(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    run = navarch("local", "inject", "fleet.yaml", "demo-train-0001")
    assert run.code == 1
    assert "usage: navarch local inject" in run.err and "no fault given" in run.err
    assert run.out == ""


def test_status_shows_zone_and_type_and_never_offline_as_healthy(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--silent")
    later = {"NAVARCH_NOW": _at(11)}
    navarch.ok("local", "tick", "fleet.yaml", env=later)
    out = navarch.ok("status", "fleet.yaml", "--all", env=later).out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("POOL"))
    assert header.split()[:5] == ["POOL", "NODE", "INSTANCE", "ZONE", "TYPE"]
    row = next(line for line in out.splitlines() if "demo-train-0002" in line)
    assert "sim-1a" in row or "sim-1b" in row
    assert "sim-h100x8" in row
    assert "offline (was healthy)" in row and "(100)" in row
    assert " healthy  100 " not in row
    fresh = next(line for line in out.splitlines() if "demo-train-0001" in line)
    assert " healthy " in fresh and " 100 " in fresh
