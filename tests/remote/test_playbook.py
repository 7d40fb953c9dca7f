"""Playbook files: loading, validation errors, shell-quoted rendering, built-in checks."""

from __future__ import annotations

import shlex
from pathlib import Path

import jinja2
import pytest

from navarch.errors import ConfigError
from navarch.remote.playbook import (
    SCHEDULER_KINDS,
    PlaybookKind,
    StepHost,
    load_playbook,
    load_playbook_file,
)

CONTEXT = {
    "node": "gpu-1",
    "pool": "train",
    "fleet": "prod",
    "reason": "xid 79",
    "address": "10.0.0.5",
    "drain_timeout_s": 600,
}
HOSTILE = 'it\'s "bad"; rm -rf / $(reboot) `id` $HOME\nsecond line\\'


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
@pytest.mark.parametrize("kind", SCHEDULER_KINDS)
def test_builtin_playbooks_load_and_render(scheduler: str, kind: PlaybookKind) -> None:
    playbook = load_playbook(scheduler, kind)
    assert playbook is not None
    assert playbook.kind is kind and playbook.scheduler == scheduler
    assert playbook.steps and playbook.uses_head
    for step in playbook.steps:
        assert step.host is StepHost.HEAD
        assert "gpu-1" in step.render(CONTEXT)


def test_scheduler_none_has_no_remote_steps() -> None:
    for kind in SCHEDULER_KINDS:
        assert load_playbook("none", kind) is None


def test_slurm_cordon_renders_the_scontrol_command() -> None:
    step = load_playbook("slurm", "cordon").steps[0]
    assert shlex.split(step.render(CONTEXT)) == [
        "scontrol",
        "update",
        "NodeName=gpu-1",
        "State=DRAIN",
        "Reason=navarch: xid 79",
    ]


def test_kubernetes_drain_passes_the_drain_timeout() -> None:
    steps = load_playbook("kubernetes", "drain").steps
    words = shlex.split(steps[-1].render(CONTEXT))
    assert words[:3] == ["nohup", "kubectl", "drain"]
    assert "--timeout=600s" in words and "--ignore-daemonsets" in words


def test_every_substituted_value_is_one_literal_shell_word() -> None:
    step = load_playbook("slurm", "cordon").steps[0]
    command = step.render({**CONTEXT, "reason": HOSTILE, "node": "a b;c"})
    assert shlex.split(command) == [
        "scontrol",
        "update",
        "NodeName=a b;c",
        "State=DRAIN",
        f"Reason=navarch: {' '.join(HOSTILE.split())}",  # one line, as Slurm shows it
    ]


def test_a_missing_variable_at_render_time_is_an_error() -> None:
    step = load_playbook("kubernetes", "drain").steps[-1]
    context = {k: v for k, v in CONTEXT.items() if k != "drain_timeout_s"}
    with pytest.raises(jinja2.UndefinedError, match="drain_timeout_s"):
        step.render(context)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "custom.yaml"
    path.write_text(text)
    return path


def test_custom_file_overrides_the_builtin(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
playbooks:
  cordon:
    steps:
      - run: systemctl stop {{ pool }}-worker
        sudo: true
        timeout: 2m
        expect: {exit_codes: [0, 5], output_matches: "^stopped$"}
        ignore_errors: true
""",
    )
    playbook = load_playbook("none", "cordon", override_path=path)
    (step,) = playbook.steps
    assert (step.host, step.sudo, step.timeout_s) == (StepHost.NODE, True, 120.0)
    assert step.exit_codes == (0, 5) and step.ignore_errors
    assert step.key_path == "playbooks.cordon.steps[0]"
    assert shlex.split(step.render(CONTEXT)) == [
        "sudo",
        "-n",
        "--",
        "sh",
        "-c",
        "systemctl stop train-worker",
    ]
    assert step.succeeded(5, "stopped\n") and not step.succeeded(5, "running\n")
    assert not step.succeeded(1, "stopped\n") and not step.succeeded(None, "")


@pytest.mark.parametrize(
    ("text", "key_path", "line", "message"),
    [
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: echo\n        host: controller\n",
            "playbooks.cordon.steps[0].host",
            5,
            "is not one of",
        ),
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: echo\n        timeout: 30 seconds\n",
            "playbooks.cordon.steps[0].timeout",
            5,
            "does not match",
        ),
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: echo\n      - sudo: true\n",
            "playbooks.cordon.steps[1]",
            5,
            "'run' is a required property",
        ),
        (
            "playbooks:\n  evict:\n    steps: []\n",
            "playbooks",
            1,
            "Additional properties",
        ),
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: kubectl cordon {{ nod }}\n",
            "playbooks.cordon.steps[0]",
            4,
            "unknown template variable(s) nod",
        ),
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: echo {{ node\n",
            "playbooks.cordon.steps[0]",
            4,
            "bad template",
        ),
        (
            "playbooks:\n  cordon:\n    steps:\n      - run: echo\n"
            "        expect: {output_matches: '(unclosed'}\n",
            "playbooks.cordon.steps[0]",
            4,
            "bad regular expression",
        ),
    ],
)
def test_bad_files_name_file_line_key_path_and_hint(
    tmp_path: Path, text: str, key_path: str, line: int, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_playbook("slurm", "cordon", override_path=path)
    err = info.value
    assert err.file == str(path)
    assert err.key_path == key_path
    assert err.line == line
    assert message in err.message
    assert err.hint


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "playbooks:\n  cordon:\n    steps: [\n")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_playbook("slurm", "cordon", override_path=path)
    assert info.value.file == str(path) and info.value.line is not None


SECRET = "s3cr3t-0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"root:x:0:0:{SECRET}:/root:/bin/bash\n", "must be of type object (found a string)"),
        (f"{SECRET}\n", "must be of type object (found a string)"),
        (f"playbooks: {{cordon: {{steps: [{{run: echo, host: {SECRET}}}]}}}}\n", "is not one of"),
        (
            f"playbooks: {{cordon: {{steps: [{{run: echo, timeout: {SECRET}}}]}}}}\n",
            "does not match",
        ),
        (f"playbooks: {{cordon: {{steps: [{{run: echo, sudo: {SECRET}}}]}}}}\n", "type boolean"),
        (
            f'playbooks:\n  cordon:\n    steps:\n      - run: "{{{{ {SECRET} }}}} {{{{"\n',
            "bad template",
        ),
        (f"a: *{SECRET.replace('-', '')}\n", "not valid YAML"),
    ],
)
def test_a_file_that_is_no_playbook_is_named_but_its_content_never_quoted(
    tmp_path: Path, text: str, message: str
) -> None:
    # A pool's playbook path may point at any file by mistake (or by an assistant's design):
    # the error names the file, line and key path, never what the file holds.
    path = tmp_path / "not-a-playbook.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_playbook_file(path, "cordon")
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    for part in (SECRET, SECRET.replace("-", ""), "root:", "/bin/bash"):
        assert part not in str(caught.value), str(caught.value)


def test_a_file_for_another_scheduler_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "scheduler: kubernetes\nplaybooks:\n  cordon: {steps: []}\n")
    with pytest.raises(ConfigError, match="written for scheduler 'kubernetes'") as info:
        load_playbook("slurm", "cordon", override_path=path)
    assert info.value.key_path == "scheduler" and info.value.line == 1


def test_a_file_without_the_kind_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "playbooks:\n  cordon: {steps: []}\n")
    with pytest.raises(ConfigError, match="no 'drain' playbook"):
        load_playbook("slurm", "drain", override_path=path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read playbook file"):
        load_playbook_file(tmp_path / "nope.yaml", "cordon")


def _slurm_show(state: str) -> str:
    return (
        "NodeName=gpu-1 Arch=x86_64 CoresPerSocket=32\n"
        "   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01\n"
        f"   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A\n"
        "   Reason=navarch: xid 79 [root@2026-11-21T21:00:00]\n"
    )


@pytest.mark.parametrize(
    ("state", "drained"),
    [
        ("IDLE+DRAIN", True),
        ("DRAINED", True),
        ("DOWN+DRAIN", True),
        ("IDLE+CLOUD+DRAIN", True),
        ("MIXED+DRAIN", False),
        ("ALLOCATED+DRAIN", False),
        ("IDLE+COMPLETING+DRAIN", False),
        ("DRAINING", False),
        ("IDLE", False),
        ("MIXED", False),
    ],
)
def test_slurm_drain_check_reads_scontrol_show_node(state: str, drained: bool) -> None:
    step = load_playbook("slurm", "drain_check").steps[0]
    assert step.succeeded(0, _slurm_show(state)) is drained


@pytest.mark.parametrize(
    ("stdout", "drained"),
    [
        ("", True),
        ("kube-system   nvidia-device-plugin-x7   DaemonSet\n", True),
        (
            "kube-system   dcgm-exporter-1   DaemonSet\nkube-system   kube-proxy-gpu-1   Node\n",
            True,
        ),
        ("default   trainer-0   StatefulSet\nkube-system   dcgm-1   DaemonSet\n", False),
        ("kube-system   dcgm-1   DaemonSet\ndefault   web-1   ReplicaSet\n", False),
        ("default   bare-pod   <none>\n", False),
    ],
)
def test_kubernetes_drain_check_ignores_daemonset_and_mirror_pods(
    stdout: str, drained: bool
) -> None:
    step = load_playbook("kubernetes", "drain_check").steps[0]
    assert step.succeeded(0, stdout) is drained


def test_the_example_in_docs_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "playbooks.md").read_text()
    block = doc.split("# playbooks/site-slurm.yaml\n", 1)[1].split("```", 1)[0]
    path = write(tmp_path, block)
    cordon = load_playbook("slurm", "cordon", override_path=path)
    assert [s.host for s in cordon.steps] == [StepHost.HEAD, StepHost.NODE]
    assert shlex.split(cordon.steps[0].render(CONTEXT))[-1] == "Reason=navarch: xid 79"
    assert shlex.split(cordon.steps[1].render(CONTEXT))[:2] == ["sudo", "-n"]
    assert load_playbook("slurm", "uncordon", override_path=path).steps
