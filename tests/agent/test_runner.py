"""One agent run on the fake backend: report contents, signing, latching, escalation, state."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, load_config, run_once
from navarch.errors import ConfigError
from navarch.report import signing

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = bytes.fromhex("5a" * 32)
FAULTS = {
    "gpu_lost": [3],
    "temperature_c": {"2": 97.0},
    "ecc_uncorrected": {"1": 2},
    "unreadable": {"4": ["power_w"]},
    "utilization_pct": 35.0,
    "process_count": {"0": 1},
    "remapped_rows_pending": [5],
    "remapped_rows_failure": [6],
}
XID79 = "[  100.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
XID13 = "[  200.{n:06d}] NVRM: Xid (PCI:0000:18:00): 13, pid=77, name=python, Graphics Exception: ESR 0x1\n"


def bad(report: dict[str, Any]) -> dict[tuple[str, int | None], tuple[str, str]]:
    return {
        (c["name"], c["gpu_index"]): (c["status"], c["action"])
        for c in report["checks"]
        if c["status"] != "healthy"
    }


def append(cfg: AgentConfig, text: str) -> None:
    with open(cfg.kernel_log, "a") as fh:  # type: ignore[arg-type]
        fh.write(text)


def test_healthy_fake_node(
    make_config: Callable[..., AgentConfig], read_stored: Any, validate_report: Any
) -> None:
    cfg = make_config()
    report = run_once(cfg, now=T0)
    validate_report(report)
    assert (report["status"], report["action"], report["health_score"]) == ("healthy", "none", 100)
    assert read_stored(cfg) == report
    assert signing.verify(report, KEY)
    assert not signing.verify(report, bytes(32))
    assert len(report["gpus"]) == 8
    assert [g["pci_bus_id"] for g in report["gpus"]] == [
        "0000:18:00",
        "0000:2a:00",
        "0000:3a:00",
        "0000:5d:00",
        "0000:9a:00",
        "0000:ab:00",
        "0000:ba:00",
        "0000:db:00",
    ]
    for g in report["gpus"]:
        assert g["name"] == "NVIDIA H100 80GB HBM3"
        assert g["memory_total_bytes"] == 81559 * 1024 * 1024
        assert 35 <= g["temperature_c"] <= 45 and 70 <= g["power_w"] <= 120
        assert g["process_count"] == 0 and g["utilization_pct"] == 0.0
    assert (
        report["fleet"],
        report["pool"],
        report["node"],
        report["instance_id"],
        report["boot_id"],
    ) == ("demo", "train", "train-0001", "i-0123", "boot-a")


def test_fake_uuids_are_deterministic_per_node(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    a = run_once(make_config(), now=T0)
    b = run_once(make_config(state_file=str(tmp_path / "s2.json")), now=T0)
    c = run_once(make_config(node="train-0002", state_file=str(tmp_path / "s3.json")), now=T0)
    uuids = [g["uuid"] for g in a["gpus"]]
    assert uuids == [g["uuid"] for g in b["gpus"]]
    assert set(uuids).isdisjoint(g["uuid"] for g in c["gpus"])
    assert len(set(uuids)) == 8 and all(u.startswith("GPU-") and len(u) == 40 for u in uuids)


def test_every_injected_fault(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    cfg = make_config()
    Path(cfg.faults_file).write_text(json.dumps(FAULTS))  # type: ignore[arg-type]
    report = run_once(cfg, now=T0)
    validate_report(report)
    found = bad(report)
    assert found[("gpu_lost", 3)] == ("unhealthy", "reboot")
    assert found[("temperature", 2)] == ("unhealthy", "replace")
    assert found[("ecc", 1)] == ("unhealthy", "reset_gpu")
    assert found[("readings", 4)] == ("degraded", "none")
    assert found[("remapped_rows", 5)] == ("unhealthy", "reset_gpu")
    assert found[("remapped_rows", 6)] == ("unhealthy", "replace")
    assert (report["status"], report["action"]) == ("unhealthy", "replace")
    assert report["health_score"] == 0
    gpus = report["gpus"]
    assert gpus[0]["process_count"] == 1 and all(
        g["process_count"] == 0 for g in gpus[1:] if g["index"] != 3
    )
    assert all(g["utilization_pct"] == 35.0 for g in gpus if g["index"] != 3)
    assert gpus[3]["temperature_c"] is None and gpus[4]["power_w"] is None
    assert gpus[2]["temperature_c"] == 97.0


def test_gpu_count_below_pool_expectation(
    make_config: Callable[..., AgentConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_GPU_COUNT", "7")
    report = run_once(make_config(), now=T0)
    assert bad(report)[("gpu_count", None)] == ("unhealthy", "reboot")
    assert len(report["gpus"]) == 7


def test_env_selects_fake_backend(
    make_config: Callable[..., AgentConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_FAKE_GPU", "true")
    monkeypatch.setenv("NAVARCH_GPU_COUNT", "4")
    cfg = make_config(fake_gpu=False, gpus_per_node=4)
    report = run_once(cfg, now=T0)
    assert len(report["gpus"]) == 4 and report["status"] == "healthy"


def test_faults_from_env_path(
    make_config: Callable[..., AgentConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "env-faults.json"
    path.write_text(json.dumps({"gpu_lost": [0]}))
    monkeypatch.setenv("NAVARCH_FAKE_GPU_FAULTS", str(path))
    report = run_once(make_config(faults_file=None), now=T0)
    assert bad(report)[("gpu_lost", 0)] == ("unhealthy", "reboot")


def test_bad_faults_file_does_not_stop_the_agent(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    cfg = make_config()
    Path(cfg.faults_file).write_text("{not json")  # type: ignore[arg-type]
    report = run_once(cfg, now=T0)
    validate_report(report)
    assert report["status"] == "healthy"


def test_application_xid_burst_keeps_node_healthy(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    cfg = make_config()
    append(cfg, "".join(XID13.format(n=n * 10_000) for n in range(40)))
    report = run_once(cfg, now=T0)
    validate_report(report)
    assert report["status"] == "healthy" and report["action"] == "none"
    assert [(x["code"], x["count"], x["severity"]) for x in report["xids"]] == [(13, 40, "ignore")]


def test_fatal_xid_is_latched_until_reboot(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    cfg = make_config()
    append(cfg, XID79)
    reports = [run_once(cfg, now=T0 + timedelta(minutes=n)) for n in range(3)]
    for r in reports:
        validate_report(r)
        assert r["status"] == "unhealthy" and r["action"] == "reboot"
        assert [(x["code"], x["pci_bus_id"], x["boot_id"]) for x in r["xids"]] == [
            (79, "0000:2a:00", "boot-a")
        ]
        assert bad(r)[("xid", 1)] == ("unhealthy", "reboot")
    after = run_once(make_config(boot_id="boot-b"), now=T0 + timedelta(minutes=5))
    assert after["xids"] == [] and after["status"] == "healthy"
    seqs = [r["sequence"] for r in [*reports, after]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4 and seqs[1] == seqs[0] + 1


def test_lines_after_reboot_belong_to_new_boot(make_config: Callable[..., AgentConfig]) -> None:
    cfg = make_config()
    run_once(cfg, now=T0)
    cfg_b = make_config(boot_id="boot-b")
    run_once(cfg_b, now=T0 + timedelta(minutes=1))
    append(cfg_b, XID79)
    r = run_once(cfg_b, now=T0 + timedelta(minutes=2))
    assert [(x["code"], x["boot_id"]) for x in r["xids"]] == [(79, "boot-b")]


def test_recurring_fault_is_counted_never_escalated_by_the_node(
    make_config: Callable[..., AgentConfig],
) -> None:
    actions, boots = [], []
    for n, boot in enumerate(["boot-a", "boot-b", "boot-c"]):
        cfg = make_config(boot_id=boot)
        append(cfg, XID79)
        r = run_once(cfg, now=T0 + timedelta(hours=n))
        actions.append(r["action"])
        xid = [c for c in r["checks"] if c["name"] == "xid"][0]
        boots.append(xid["boots_seen"])
    assert actions == ["reboot", "reboot", "reboot"]  # the pool's ladder decides, not the node
    assert boots == [1, 2, 3]
    assert (
        xid["fault_key"]["kind"] == "xid:79" and xid["gpu_index"] == xid["fault_key"]["gpu_index"]
    )
    assert xid["first_seen"] == "2026-03-02T12:00:00.000Z" or xid["first_seen"].endswith("Z")


def test_recurrence_outside_lookback_is_counted_afresh(
    make_config: Callable[..., AgentConfig],
) -> None:
    boots = []
    for n, boot in enumerate(["boot-a", "boot-b", "boot-c"]):
        cfg = make_config(boot_id=boot)
        append(cfg, XID79)
        r = run_once(cfg, now=T0 + timedelta(days=4 * n))
        boots.append([c for c in r["checks"] if c["name"] == "xid"][0]["boots_seen"])
    assert boots == [1, 1, 1]


def test_lost_gpu_recurring_over_reboots_keeps_its_reboot(
    make_config: Callable[..., AgentConfig],
) -> None:
    actions = []
    for n, boot in enumerate(["boot-a", "boot-b", "boot-c"]):
        cfg = make_config(boot_id=boot)
        Path(cfg.faults_file).write_text(json.dumps({"gpu_lost": [3]}))  # type: ignore[arg-type]
        r = run_once(cfg, now=T0 + timedelta(hours=n))
        actions.append(r["action"])
    lost = [c for c in r["checks"] if c["name"] == "gpu_lost"][0]
    assert actions == ["reboot", "reboot", "reboot"]
    assert lost["fault_key"] == {"kind": "gpu_lost", "gpu_index": 3} and lost["boots_seen"] == 3


def test_corrupt_state_is_rebuilt_and_sequence_still_grows(
    make_config: Callable[..., AgentConfig], read_stored: Any
) -> None:
    cfg = make_config()
    first = run_once(cfg, now=T0)
    Path(cfg.state_file).write_text("{garbage")
    second = run_once(cfg, now=T0 + timedelta(minutes=1))
    assert second["sequence"] > first["sequence"]
    third = run_once(cfg, now=T0 + timedelta(minutes=2))
    assert third["sequence"] == second["sequence"] + 1


def test_lost_state_and_store_fall_back_to_clock(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    cfg = make_config()
    for n in range(3):
        run_once(cfg, now=T0 + timedelta(minutes=n))
    last = json.loads(Path(cfg.state_file).read_text())["sequence"]
    Path(cfg.state_file).unlink()
    cfg2 = make_config(
        store=f"file://{tmp_path}/other-store"
    )  # previous report not readable either
    r = run_once(cfg2, now=T0 + timedelta(minutes=3))
    assert r["sequence"] > last
    assert r["sequence"] >= int((T0 + timedelta(minutes=3)).timestamp() * 1000)


def test_state_written_atomically(make_config: Callable[..., AgentConfig]) -> None:
    cfg = make_config()
    run_once(cfg, now=T0)
    state_dir = Path(cfg.state_file).parent
    assert [p.name for p in state_dir.iterdir()] == ["agent-state.json"]
    doc = json.loads(Path(cfg.state_file).read_text())
    assert doc["version"] == 1 and doc["boot_id"] == "boot-a" and doc["sequence"] >= 1


def test_missing_key_is_a_config_error(make_config: Callable[..., AgentConfig]) -> None:
    with pytest.raises(ConfigError, match="no node key"):
        run_once(make_config(key=None), now=T0)


def test_key_file(make_config: Callable[..., AgentConfig], tmp_path: Path) -> None:
    key_file = tmp_path / "node.key"
    key_file.write_text("5a" * 32 + "\n")
    report = run_once(make_config(key=None, key_file=str(key_file)), now=T0)
    assert signing.verify(report, KEY)


def test_load_config_yaml(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "fleet: demo\npool: train\nnode: n1\nstore: file:///tmp/x\nkey: '"
        + "ab" * 32
        + "'\ngpus_per_node: 8\nfake_gpu: true\nmetadata: none\n"
    )
    cfg = load_config(path)
    assert (cfg.fleet, cfg.gpus_per_node, cfg.fake_gpu, cfg.metadata) == ("demo", 8, True, "none")
    assert cfg.report_key == "health/demo/train/n1.json"
    assert load_config(path, kernel_log="/tmp/k.log").kernel_log == "/tmp/k.log"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("fleet: demo\npool: p\nnode: n\nstore: file:///x\nbogus: 1\n", "bogus: unknown key"),
        ("fleet: demo\npool: p\nnode: n\n", "missing required key"),
        (
            "fleet: demo\npool: p\nnode: n\nstore: file:///x\ngpus_per_node: eight\n",
            "gpus_per_node: expected int",
        ),
        (
            "fleet: demo\npool: p\nnode: n\nstore: file:///x\nmetadata: ibm\n",
            "metadata: metadata must be one of",
        ),
        ("fleet: [demo\n", r"agent.yaml:\d+: invalid YAML"),
    ],
)
def test_load_config_errors(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_fatal_xid_survives_a_flood_of_application_xids(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config()
    append(cfg, XID79)
    run_once(cfg, now=T0)
    # 400 separate XID 13 events (2 s apart, so no burst collapses them) over later runs.
    for batch in range(4):
        append(
            cfg,
            "".join(
                f"[{1000 + 2 * (batch * 100 + n)}.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, ESR\n"
                for n in range(100)
            ),
        )
        r = run_once(cfg, now=T0 + timedelta(minutes=batch + 1))
    assert len(r["xids"]) == 256
    assert [x["code"] for x in r["xids"] if x["severity"] == "fatal"] == [79]
    assert r["status"] == "unhealthy"


class _BrokenBackend:
    name = "nvml"

    def probe(self) -> Any:
        raise RuntimeError("bug in a backend")


def test_agent_bug_in_probe_still_reports_unknown(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    report = run_once(make_config(), now=T0, backend=_BrokenBackend())
    validate_report(report)
    assert report["status"] == "unknown" and report["action"] == "none"


def test_notice_file_from_local_provider(
    make_config: Callable[..., AgentConfig], tmp_path: Path, validate_report: Any
) -> None:
    notice = tmp_path / "notice.json"
    notice.write_text(
        json.dumps(
            {"kind": "preemption", "source": "local", "deadline": None, "detail": "injected"}
        )
    )
    report = run_once(make_config(notice_file=str(notice)), now=T0)
    validate_report(report)
    assert report["notice"] == {
        "kind": "preemption",
        "source": "local",
        "deadline": None,
        "detail": "injected",
    }
    notice.write_text("not json")
    assert (
        run_once(make_config(notice_file=str(notice)), now=T0 + timedelta(minutes=1))["notice"]
        is None
    )


def test_journal_source_cursor_and_previous_boot(
    make_config: Callable[..., AgentConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """journald path: the cursor is saved and passed on; a previous boot's fatal XID counts
    toward the reboot-escalation history but is not latched into this boot."""
    import os
    import stat

    from navarch.agent import kernel_log

    boot_a, boot_b = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
    out = tmp_path / "journal.jsonl"
    args = tmp_path / "args"
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> {args}\ncat {out}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(kernel_log, "journal_available", lambda: True)

    def journal(*records: tuple[str, str, str]) -> None:
        out.write_text(
            "".join(
                json.dumps(
                    {
                        "MESSAGE": m,
                        "_BOOT_ID": b.replace("-", ""),
                        "__CURSOR": c,
                        "__REALTIME_TIMESTAMP": "1772366400000000",
                    }
                )
                + "\n"
                for m, b, c in records
            )
        )

    class Healthy:
        name = "nvml"

        def probe(self) -> Any:
            from navarch.agent.gpu import FakeGpuBackend

            return FakeGpuBackend("train-0001", 8).probe()

    xid = "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    journal((xid, boot_a, "c1"), (xid, boot_b, "c2"))
    cfg = make_config(fake_gpu=False, kernel_log=None, boot_id=boot_b)
    r1 = run_once(cfg, now=T0, backend=Healthy())
    assert [(x["code"], x["boot_id"]) for x in r1["xids"]] == [(79, boot_b)]
    assert r1["action"] == "reboot"
    assert "-b" in args.read_text().split()
    journal()
    r2 = run_once(cfg, now=T0 + timedelta(minutes=1), backend=Healthy())
    assert "--after-cursor=c2" in args.read_text().splitlines()[-1]
    assert [x["code"] for x in r2["xids"]] == [79]  # latched, although the journal had nothing new
    # Third boot, same fault again: two earlier boots (a from the journal, b) are counted.
    journal((xid, "cccccccc-0000-0000-0000-000000000003", "c3"))
    r3 = run_once(
        make_config(
            fake_gpu=False, kernel_log=None, boot_id="cccccccc-0000-0000-0000-000000000003"
        ),
        now=T0 + timedelta(hours=1),
        backend=Healthy(),
    )
    xid_check = [c for c in r3["checks"] if c["name"] == "xid"][0]
    assert r3["action"] == "reboot" and xid_check["boots_seen"] == 3


def test_any_reading_can_be_made_unreadable(
    make_config: Callable[..., AgentConfig], validate_report: Any
) -> None:
    cfg = make_config()
    Path(cfg.faults_file).write_text(
        json.dumps({"unreadable": {"2": ["process_count", "temperature_c"]}})
    )  # type: ignore[arg-type]
    report = run_once(cfg, now=T0)
    validate_report(report)
    g = report["gpus"][2]
    assert g["process_count"] is None and g["temperature_c"] is None and g["power_w"] is not None
    assert bad(report) == {("readings", 2): ("degraded", "none")}
