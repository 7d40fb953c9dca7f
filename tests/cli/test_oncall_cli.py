"""The CLI an on-call engineer meets: help that ends with exit codes and an example, a
command list from bare `navarch`, completion, a default fleet file, errors that name the
fix (nearest key, accepted forms, runbook section), JSON error lines, a PR comment that is
never blank, destroy's per-action lines, plan lines that say what their counts mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

VERBS = (
    "validate",
    "plan",
    "apply",
    "destroy",
    "status",
    "history",
    "force-unlock",
    "uncordon",
    "reboot",
    "cordon",
    "ssh",
    "simulate",
    "completion",
)


def test_bare_navarch_lists_the_commands_and_exits_1(navarch) -> None:
    run = navarch()
    assert run.code == 1
    for verb in VERBS:
        assert verb in run.err, verb
    assert "docs/runbook.md" in run.err
    run = navarch("--help")
    assert run.code == 0 and "history" in run.out and "exit codes" in run.out


@pytest.mark.parametrize("verb", [*VERBS, "local tick", "agent run"])
def test_each_verbs_help_ends_with_exit_codes_and_an_example(navarch, verb: str) -> None:
    run = navarch(*verb.split(), "--help")
    assert run.code == 0, run.err
    tail = run.out.rstrip().splitlines()[-3:]
    assert tail[0].startswith("exit codes: 0 "), run.out
    assert tail[1] == "example:" and tail[2].strip().startswith("navarch "), run.out


def test_version(navarch) -> None:
    from navarch import __version__

    assert navarch.ok("--version").out.strip() == f"navarch {__version__}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_come_from_the_parser(navarch, shell: str, tmp_path: Path) -> None:
    script = navarch.ok("completion", shell).out
    assert "navarch" in script and "_ARGCOMPLETE" in script
    answer = tmp_path / "completions"
    line = "navarch hist"
    # A shell's completion request: argcomplete answers and ends the process (os._exit).
    run = navarch(
        subprocess=True,
        env={
            "_ARGCOMPLETE": "1",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_SHELL": shell,
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        },
    )
    assert run.code == 0, run.err
    assert "history" in answer.read_text()


def test_the_fleet_file_defaults_to_navarch_fleet_then_fleet_yaml(navarch, fleet_dir) -> None:
    assert "fleet.yaml: valid." in navarch.ok("validate").out
    (fleet_dir / "fleet.yaml").rename(fleet_dir / "prod.yaml")
    run = navarch("validate")
    assert run.code == 1
    assert "no fleet file given and no ./fleet.yaml here" in run.err
    assert "set NAVARCH_FLEET=PATH" in run.err
    assert "prod.yaml: valid." in navarch.ok("validate", env={"NAVARCH_FLEET": "prod.yaml"}).out


def _edit(fleet_dir: Path, text_from: str, text_to: str) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    assert text_from in text
    path.write_text(text.replace(text_from, text_to, 1))


def test_an_unknown_key_suggests_the_nearest_valid_one(navarch, fleet_dir) -> None:
    _edit(fleet_dir, "max_unavailable:", "max_unavailabel:")
    run = navarch("validate", "fleet.yaml")
    assert run.code == 1
    assert "unknown key 'max_unavailabel' (did you mean `max_unavailable`?)" in run.err


def test_a_value_of_no_accepted_form_names_the_forms(navarch, fleet_dir) -> None:
    doc = yaml.safe_load((fleet_dir / "fleet.yaml").read_text())
    doc["pools"]["train"]["health"]["max_unavailable"] = "lots"
    (fleet_dir / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    run = navarch("validate", "fleet.yaml")
    assert run.code == 1
    assert (
        "'lots' is none of the accepted forms: an integer >= 0; or a percentage like 25%" in run.err
    )
    assert "is not valid under any of the given schemas" not in run.err
    run = navarch("plan", "fleet.yaml")  # the first error only, the same words
    assert run.code == 1 and "'lots' is none of the accepted forms" in run.err, run.err


def test_log_format_json_makes_errors_json_lines(navarch) -> None:
    for args in (
        ("--log-format", "json", "status", "missing.yaml"),
        ("plan", "fleet.yaml", "--log-format", "json", "--bogus"),
    ):
        run = navarch(*args)
        assert run.code == 1
        lines = [json.loads(line) for line in run.err.splitlines()]
        assert lines and all(doc["level"] == "error" and doc["run_id"] for doc in lines), run.err
    assert "missing.yaml" in navarch("--log-format", "json", "status", "missing.yaml").err


def test_plan_markdown_out_writes_the_comment_or_a_failure_comment(navarch, fleet_dir) -> None:
    navarch.ok("plan", "fleet.yaml", "--markdown", "--out", "plan.md")
    assert (fleet_dir / "plan.md").read_text().startswith("### navarch plan")
    _edit(fleet_dir, "max_unavailable:", "max_unavailabel:")
    run = navarch("plan", "fleet.yaml", "--markdown", "--out", "plan.md")
    assert run.code == 1
    comment = (fleet_dir / "plan.md").read_text()
    assert comment.startswith("### navarch plan failed (exit 1)")
    assert "unknown key 'max_unavailabel'" in comment


def test_destroy_prints_a_line_per_action(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    out = navarch("destroy", "fleet.yaml", "--pool", "infer", "--auto-approve", "--force").out
    assert "demo-infer-0001: terminate ok: terminated i-" in out, out
    assert "demo-infer-0001: terminate ok: " in out and "demo-infer-0002: terminate ok: " in out


def test_plan_lines_say_what_the_fallback_count_is(navarch) -> None:
    out = navarch.ok("plan", "fleet.yaml").out
    assert (
        "+ provision demo-train-0001 in sim-1a/sim-h100x8, then 3 other zones/types if "
        "out of capacity" in out
    ), out
    assert "place(s)" not in out


def test_corrupt_state_on_a_file_store_names_a_backup_not_history(navarch, fleet_dir) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    (fleet_dir / ".navarch" / "store" / "state" / "demo.json").write_text("{broken")
    run = navarch("status", "fleet.yaml")
    assert run.code == 1
    assert "file:// store keeps no history" in run.err
    assert "store's history" not in run.err
    assert "docs/runbook.md#store-unreachable" in run.err


def test_ssh_opens_a_session_with_the_pools_settings_and_the_nodes_address(
    navarch, fleet_dir
) -> None:
    # A stand-in `ssh` on PATH that prints the command line navarch runs.
    bin_dir = fleet_dir / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ssh"
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\nsys.exit(7)\n"
    )
    fake.chmod(0o755)
    (fleet_dir / "keys").mkdir()
    (fleet_dir / "keys" / "train.pem").write_text("not a real key\n")
    doc = yaml.safe_load((fleet_dir / "fleet.yaml").read_text())
    doc["pools"]["train"]["ssh"] = {"user": "ubuntu", "port": 2222, "key_file": "keys/train.pem"}
    (fleet_dir / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    # ssh writes to the file descriptors it inherits: a process of its own captures them.
    run = navarch(
        "ssh", "fleet.yaml", "demo-train-0001", "--", "nvidia-smi", "-L", env=env, subprocess=True
    )
    assert run.code == 7, run.err  # ssh's own exit code
    argv = json.loads(run.out)
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == str(fleet_dir / "keys" / "train.pem")
    assert argv[-4:] == ["ubuntu@127.0.0.1", "--", "nvidia-smi", "-L"]

    argv = json.loads(
        navarch("ssh", "demo-infer-0001", env=env, subprocess=True).out
    )  # default fleet file
    assert argv[-1] == "root@127.0.0.1"

    run = navarch("ssh", "fleet.yaml", "demo-train-0042", env=env)
    assert run.code == 1 and "demo-train-0042 is not a node of fleet demo" in run.err
