"""SSHRunner against a real OpenSSH sshd on 127.0.0.1 with scontrol/kubectl stand-ins."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.remote.playbook import load_playbook, load_playbook_file
from navarch.remote.runner import PlaybookTarget, SSHRunner

from .conftest import Sshd, Standin, free_port

REASON = "xid 79: GPU has fallen off the bus"
HOSTILE = 'it\'s "bad"; rm -rf /tmp/x $(touch /tmp/pwned) `id` $HOME\nsecond line \\ end'


def target(node: str = "gpu-1", reason: str = REASON) -> PlaybookTarget:
    return PlaybookTarget(fleet="prod", pool="train", node=node, address="127.0.0.1", reason=reason)


def slurm_world(*nodes: str, busy_checks: int = 0, style: str = "flags") -> dict:
    return {
        "slurm": {
            n: {
                "base": "MIXED",
                "flags": [],
                "reason": "",
                "busy_checks": busy_checks,
                "style": style,
            }
            for n in nodes
        }
    }


def custom(tmp_path: Path, text: str, kind: str = "cordon"):
    path = tmp_path / "custom.yaml"
    path.write_text(text)
    return load_playbook_file(path, kind)


# --- Slurm ---------------------------------------------------------------------------


def test_slurm_drain_check_accepts_the_legacy_drained_state(sshd: Sshd, standin: Standin) -> None:
    # Older Slurm releases show a drained node as DRAINED; 22.05 shows IDLE+DRAIN, which
    # tests/slurm proves against the real daemon.
    standin.set_state(slurm_world("gpu-1", busy_checks=2, style="legacy"))
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    runner.run(load_playbook("slurm", "cordon"), [target()])
    (drain,) = runner.run(load_playbook("slurm", "drain"), [target()])
    assert drain.ok

    check = load_playbook("slurm", "drain_check")
    seen = [runner.run(check, [target()])[0] for _ in range(3)]
    assert [o.ok for o in seen] == [False, False, True]
    assert "State=MIXED+DRAIN" in seen[0].steps[0].output_tail
    assert seen[0].steps[0].exit_code == 0 and not seen[0].steps[0].ok
    assert "does not match" in (seen[0].error or "")
    assert "State=DRAINED" in seen[2].steps[0].output_tail
    assert standin.calls("scontrol")[-1] == ["show", "node", "gpu-1"]


# --- Kubernetes ----------------------------------------------------------------------


def k8s_world() -> dict:
    pods = [
        ("default", "trainer-0", "gpu-1", "StatefulSet"),
        ("default", "web-5d9c", "gpu-1", "ReplicaSet"),
        ("kube-system", "nvidia-device-plugin-x7", "gpu-1", "DaemonSet"),
        ("kube-system", "kube-proxy-gpu-1", "gpu-1", "Node"),
        ("default", "other-0", "gpu-2", "StatefulSet"),
    ]
    return {
        "k8s": {
            "nodes": {"gpu-1": {"unschedulable": False}, "gpu-2": {"unschedulable": False}},
            "pods": [
                {"namespace": ns, "name": n, "node": node, "owner": owner}
                for ns, n, node, owner in pods
            ],
        }
    }


def test_kubernetes_cordon_drain_check_uncordon(sshd: Sshd, standin: Standin) -> None:
    standin.set_state(k8s_world())
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())

    (cordon,) = runner.run(load_playbook("kubernetes", "cordon"), [target()])
    assert cordon.ok and "node/gpu-1 cordoned" in cordon.steps[0].output_tail
    assert standin.state()["k8s"]["nodes"]["gpu-1"]["unschedulable"] is True

    check = load_playbook("kubernetes", "drain_check")
    (busy,) = runner.run(check, [target()])
    assert not busy.ok and "trainer-0" in busy.steps[0].output_tail

    (drain,) = runner.run(
        load_playbook("kubernetes", "drain"), [target()], extra={"drain_timeout_s": 900}
    )
    assert drain.ok and [s.ok for s in drain.steps] == [True, True]
    assert "evicting pod default/trainer-0 (server dry run)" in drain.steps[0].output_tail
    # The real drain runs detached on the head node; wait until it has been called.
    calls = standin.wait_for_calls("kubectl", 4)
    drains = [c for c in calls if c[0] == "drain"]
    assert drains[0] == [
        "drain",
        "gpu-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--dry-run=server",
    ]
    assert drains[1] == [
        "drain",
        "gpu-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=900s",
    ]
    for _ in range(100):
        (done,) = runner.run(check, [target()])
        if done.ok:
            break
    assert done.ok
    left = {p["name"] for p in standin.state()["k8s"]["pods"] if p["node"] == "gpu-1"}
    assert left == {"nvidia-device-plugin-x7", "kube-proxy-gpu-1"}
    get = [c for c in standin.calls("kubectl") if c[0] == "get"][-1]
    assert get[get.index("--field-selector") + 1] == (
        "spec.nodeName=gpu-1,status.phase!=Succeeded,status.phase!=Failed"
    )

    (uncordon,) = runner.run(load_playbook("kubernetes", "uncordon"), [target()])
    assert uncordon.ok
    assert standin.calls("kubectl")[-1] == ["uncordon", "gpu-1"]
    assert standin.state()["k8s"]["nodes"]["gpu-1"]["unschedulable"] is False


def test_a_missing_template_value_fails_the_outcome_without_raising(
    sshd: Sshd, standin: Standin
) -> None:
    standin.set_state(k8s_world())
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("kubernetes", "drain"), [target()])
    assert not outcome.ok
    dry_run, detached = outcome.steps
    assert dry_run.ok and detached.exit_code is None and not detached.ok
    assert "'drain_timeout_s' is undefined" in detached.output_tail
    assert "drain_timeout_s" in outcome.error
    assert [c[0] for c in standin.calls("kubectl")] == ["drain"]


# --- timeouts, failures, options -----------------------------------------------------


def test_step_timeout_fails_the_outcome_and_stops_the_playbook(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    playbook = custom(
        tmp_path,
        """\
playbooks:
  drain_check:
    steps:
      - run: scontrol show node {{ node }}
        host: head
        timeout: 1s
      - run: kubectl uncordon {{ node }}
        host: head
""",
        "drain_check",
    )
    state = slurm_world("gpu-1")
    state["delay_s"] = 20
    standin.set_state(state)
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    (outcome,) = runner.run(playbook, [target()])
    assert not outcome.ok
    (step,) = outcome.steps
    assert step.exit_code is None and not step.ok
    assert "timed out after 1s" in step.output_tail
    assert "timed out after 1s" in outcome.error and "steps[0].timeout" in outcome.error
    assert standin.calls("kubectl") == []
    # The hung call reached the node: on a busy machine its session may start after the
    # timeout, and waiting for it keeps it out of the next test's record.
    assert standin.wait_for_calls("scontrol", 1) == [["show", "node", "gpu-1"]]


def test_ignore_errors_records_the_failure_and_goes_on(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    playbook = custom(
        tmp_path,
        """\
playbooks:
  cordon:
    steps:
      - run: scontrol show node no-such-node
        host: head
        ignore_errors: true
      - run: scontrol update NodeName={{ node }} State=DRAIN Reason={{ reason }}
        host: head
      - run: scontrol show node no-such-node
        host: head
      - run: scontrol update NodeName={{ node }} State=RESUME
        host: head
""",
    )
    standin.set_state(slurm_world("gpu-1"))
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    (outcome,) = runner.run(playbook, [target()])
    assert [(s.exit_code, s.ok) for s in outcome.steps] == [(1, False), (0, True), (1, False)]
    assert not outcome.ok and "show node no-such-node" in outcome.error
    assert standin.state()["slurm"]["gpu-1"]["flags"] == ["DRAIN"]


def test_sudo_steps_run_through_sudo_n(sshd: Sshd, standin: Standin, tmp_path: Path) -> None:
    playbook = custom(
        tmp_path,
        "playbooks:\n  cordon:\n    steps:\n"
        "      - run: scontrol update NodeName={{ node }} State=DRAIN Reason={{ reason }}\n"
        "        sudo: true\n",
    )
    standin.set_state(slurm_world("gpu-1"))
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    (outcome,) = runner.run(playbook, [target(reason=HOSTILE)])
    assert outcome.ok
    (sudo,) = standin.calls("sudo")
    assert sudo[:4] == ["-n", "--", "sh", "-c"]
    assert standin.calls("scontrol") == [
        ["update", "NodeName=gpu-1", "State=DRAIN", f"Reason={HOSTILE}"]
    ]


def test_steps_on_the_node_use_its_address(sshd: Sshd, standin: Standin, tmp_path: Path) -> None:
    playbook = custom(
        tmp_path,
        "playbooks:\n  cordon:\n    steps:\n"
        "      - run: scontrol show node {{ address }}\n        host: node\n",
    )
    standin.set_state(slurm_world("127.0.0.1"))
    runner = SSHRunner(sshd.ssh(head_node=None), base_dir=Path.cwd())
    (outcome,) = runner.run(playbook, [target("gpu-9")])
    assert outcome.ok and outcome.steps[0].host == "127.0.0.1"
    assert standin.calls("scontrol") == [["show", "node", "127.0.0.1"]]


def test_head_steps_without_head_node_are_a_config_error(sshd: Sshd) -> None:
    runner = SSHRunner(sshd.ssh(head_node=None), base_dir=Path.cwd())
    with pytest.raises(ConfigError, match="ssh.head_node is not set") as info:
        runner.run(load_playbook("slurm", "cordon"), [target()])
    assert info.value.key_path == "pools.<pool>.ssh.head_node"


def test_relative_paths_resolve_against_base_dir_and_must_exist(sshd: Sshd, tmp_path: Path) -> None:
    runner = SSHRunner(
        sshd.ssh(key_file=sshd.client_key.name, known_hosts=sshd.known_hosts.name),
        base_dir=sshd.client_key.parent,
    )
    assert runner.settings.key_file == sshd.client_key
    with pytest.raises(ConfigError, match="file not found") as info:
        SSHRunner(sshd.ssh(known_hosts="nope"), base_dir=tmp_path)
    assert info.value.key_path == "pools.<pool>.ssh.known_hosts"


def test_parallel_run_bounds_concurrency_and_keeps_target_order(
    sshd: Sshd, standin: Standin
) -> None:
    nodes = [f"gpu-{i}" for i in range(6)]
    state = slurm_world(*nodes)
    state["hold_s"] = 1
    standin.set_state(state)
    runner = SSHRunner(sshd.ssh(parallel=3), base_dir=Path.cwd())
    outcomes = runner.run(load_playbook("slurm", "cordon"), [target(n) for n in nodes])
    assert [o.node for o in outcomes] == nodes
    assert all(o.ok for o in outcomes)
    assert sorted(c[1] for c in standin.calls("scontrol")) == [f"NodeName={n}" for n in nodes]
    final = standin.state()
    assert all(final["slurm"][n]["flags"] == ["DRAIN"] for n in nodes)
    assert 1 < final["max_active"] <= 3


def test_jump_host_is_used_as_a_gateway(sshd: Sshd, standin: Standin) -> None:
    standin.set_state(slurm_world("gpu-1"))
    runner = SSHRunner(sshd.ssh(jump_host=f"root@127.0.0.1:{sshd.port}"), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("slurm", "cordon"), [target()])
    assert outcome.ok, outcome.error
    assert standin.state()["slurm"]["gpu-1"]["flags"] == ["DRAIN"]


# --- host keys and connection failures -----------------------------------------------


def test_host_key_mismatch_is_refused_under_strict_policy(sshd: Sshd, standin: Standin) -> None:
    standin.set_state(slurm_world("gpu-1"))
    before = sshd.wrong_known_hosts.read_text()
    runner = SSHRunner(sshd.ssh(known_hosts=str(sshd.wrong_known_hosts)), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("slurm", "cordon"), [target()])
    assert not outcome.ok
    (step,) = outcome.steps
    assert step.exit_code is None and not step.ok
    assert "host key mismatch for 127.0.0.1:" in step.output_tail
    assert str(sshd.wrong_known_hosts) in step.output_tail and "ssh-keygen -R" in step.output_tail
    assert "no connection" in outcome.error
    assert standin.calls() == []
    assert sshd.wrong_known_hosts.read_text() == before


def test_unknown_host_is_refused_under_strict_policy(sshd: Sshd, standin: Standin) -> None:
    standin.set_state(slurm_world("gpu-1"))
    runner = SSHRunner(sshd.ssh(known_hosts=str(sshd.empty_known_hosts)), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("slurm", "cordon"), [target()])
    assert not outcome.ok and outcome.steps[0].exit_code is None
    assert f"unknown host key for [127.0.0.1]:{sshd.port}" in outcome.error
    assert "strict_host_keys: false" in outcome.error
    assert standin.calls() == []


def test_explicit_opt_out_accepts_any_host_key_and_writes_nothing(
    sshd: Sshd, standin: Standin
) -> None:
    standin.set_state(slurm_world("gpu-1"))
    ssh = sshd.ssh(known_hosts=str(sshd.empty_known_hosts), strict_host_keys=False)
    (outcome,) = SSHRunner(ssh, base_dir=Path.cwd()).run(
        load_playbook("slurm", "cordon"), [target()]
    )
    assert outcome.ok
    assert standin.calls("scontrol")[0][0] == "update"
    assert sshd.empty_known_hosts.read_text() == ""


def test_connection_refused_is_an_outcome_with_no_exit_code(sshd: Sshd) -> None:
    runner = SSHRunner(sshd.ssh(port=free_port()), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("slurm", "cordon"), [target()])
    assert not outcome.ok
    (step,) = outcome.steps
    assert step.exit_code is None and not step.ok
    assert "cannot connect to root@127.0.0.1" in step.output_tail
    assert "no connection" in outcome.error


def test_an_unauthorized_key_is_an_authentication_failure(sshd: Sshd, standin: Standin) -> None:
    other = sshd.client_key.parent / "other_key"
    runner = SSHRunner(sshd.ssh(key_file=str(other)), base_dir=Path.cwd())
    (outcome,) = runner.run(load_playbook("slurm", "cordon"), [target()])
    assert not outcome.ok and outcome.steps[0].exit_code is None
    assert "authentication failed for root@127.0.0.1" in outcome.error
    assert standin.calls() == []


def test_a_silent_server_fails_after_connect_timeout(sshd: Sshd) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        ssh = sshd.ssh(port=listener.getsockname()[1], connect_timeout="1s")
        (outcome,) = SSHRunner(ssh, base_dir=Path.cwd()).run(
            load_playbook("slurm", "cordon"), [target()]
        )
    assert not outcome.ok and outcome.steps[0].exit_code is None
    assert "no SSH handshake within 1s" in outcome.error
