"""Notifications end to end on the local provider.

Real `navarch` subprocesses against a recording HTTP server on 127.0.0.1: a signed webhook
event names the node and XID 79, a second apply on the same state sends no duplicate, a
PagerDuty-shaped sink gets one trigger when a pool's breaker trips and one resolve when it
clears, and a sink that times out leaves the apply's exit code alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from tests.support.cli import run_navarch
from tests.unattended.helpers import Recorder, write_fleet

HOOK_SECRET = "s3cr3t-hook-key-for-tests"
PD_KEY = "R0UTINGKEY-abcdef"
ENV = {"HOOK_SECRET": HOOK_SECRET, "PD_KEY": PD_KEY}


def navarch(cwd: Path, *args: str) -> tuple[int, str, str]:
    proc = run_navarch(list(args), cwd=cwd, env=ENV)
    return proc.returncode, proc.stdout, proc.stderr


def verified(rec: Recorder, path: str) -> list[dict]:
    """The JSON events posted to path, after checking each HMAC-SHA256 signature."""
    out = []
    for r in rec.at(path):
        expected = hmac.new(HOOK_SECRET.encode(), r.body, hashlib.sha256).hexdigest()
        assert r.headers["X-Navarch-Signature"] == f"sha256={expected}"
        body = r.json()
        assert r.headers["X-Navarch-Event"] == body["kind"]
        out.append(body)
    return out


def test_webhook_xid_79_signed_once_and_slow_sink_keeps_exit_code(
    tmp_path: Path, recorder: Recorder
) -> None:
    recorder.delay_s["/slow"] = 3.0
    write_fleet(
        tmp_path,
        notify=[
            {
                "type": "webhook",
                "name": "ops",
                "url": f"{recorder.url}/hook",
                "secret": {"env": "HOOK_SECRET"},
            },
            {
                "type": "webhook",
                "name": "slow",
                "url": f"{recorder.url}/slow",
                "secret": {"env": "HOOK_SECRET"},
                "timeout": "1s",
                "retries": 0,
            },
            {"type": "log", "path": "notify.jsonl"},
        ],
        safety={"fleet_circuit_breaker_pct": 100},
    )

    code, out, err = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert code == 0, out + err
    provisioned = verified(recorder, "/hook")
    assert sorted(e["node"] for e in provisioned if e["kind"] == "node_provisioned") == [
        "demo-infer-0001",
        "demo-infer-0002",
        "demo-train-0001",
        "demo-train-0002",
        "demo-train-0003",
    ]
    assert "notification to sink slow failed" in err  # logged, not fatal
    assert HOOK_SECRET not in err and HOOK_SECRET not in out

    assert navarch(tmp_path, "local", "tick", "fleet.yaml")[0] == 0
    assert (
        navarch(
            tmp_path,
            "local",
            "inject",
            "fleet.yaml",
            "demo-train-0002",
            "--xid",
            "79",
            "--gpu",
            "3",
        )[0]
        == 0
    )
    assert navarch(tmp_path, "local", "tick", "fleet.yaml")[0] == 0
    before = len(recorder.at("/hook"))
    code, out, err = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert code == 0, out + err
    new = verified(recorder, "/hook")[before:]
    cordoned = [e for e in new if e["kind"] == "node_cordoned"]
    assert len(cordoned) == 1
    event = cordoned[0]
    assert event["node"] == "demo-train-0002" and event["pool"] == "train"
    assert event["details"]["xid"] == "79" and "XID 79" in event["message"]
    assert event["severity"] == "warning" and event["fleet"] == "demo"
    # XID 79's rung is a reboot in place: no surge replacement under surge_on: replace
    assert {e["kind"] for e in new} >= {"node_cordoned", "drain_started"}
    assert "node_provisioned" not in {e["kind"] for e in new}

    # The same state again: nothing new happened, nothing is sent twice.
    before = len(recorder.at("/hook"))
    code, out, err = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert code == 0, out + err
    again = verified(recorder, "/hook")[before:]
    assert not [e for e in again if e["kind"] == "node_cordoned"]

    # The log sink wrote the same events as JSON lines; no secret anywhere in the store.
    logged = [json.loads(line) for line in (tmp_path / "notify.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in logged].count("node_cordoned") == 1
    for path in (tmp_path / ".navarch" / "store").rglob("*"):
        if path.is_file():
            assert HOOK_SECRET.encode() not in path.read_bytes(), path


def test_pagerduty_triggers_once_and_resolves_when_breaker_clears(
    tmp_path: Path, recorder: Recorder
) -> None:
    write_fleet(
        tmp_path,
        notify=[
            {"type": "pagerduty", "url": f"{recorder.url}/pd", "routing_key": {"env": "PD_KEY"}},
        ],
        safety={"fleet_circuit_breaker_pct": 100},
    )
    assert navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")[0] == 0
    assert navarch(tmp_path, "local", "tick", "fleet.yaml")[0] == 0
    assert recorder.at("/pd") == []  # provisioning pages nobody

    for node in ("demo-infer-0001", "demo-infer-0002"):
        assert navarch(tmp_path, "local", "inject", "fleet.yaml", node, "--xid", "79")[0] == 0
    assert navarch(tmp_path, "local", "tick", "fleet.yaml")[0] == 0
    for _ in range(2):  # a cron job firing twice on an open breaker pages once
        code, out, err = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        assert code == 3 and "circuit breaker open (infer)" in err, out + err
    pages = [r.json() for r in recorder.at("/pd")]
    assert len(pages) == 1
    trigger = pages[0]
    assert trigger["event_action"] == "trigger" and trigger["routing_key"] == PD_KEY
    assert trigger["dedup_key"] == "navarch/demo/infer/breaker_tripped"
    assert trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["component"] == "infer"
    assert trigger["payload"]["source"] == "navarch/demo"

    for node in ("demo-infer-0001", "demo-infer-0002"):
        assert navarch(tmp_path, "local", "inject", "fleet.yaml", node, "--clear")[0] == 0
        assert navarch(tmp_path, "local", "reboot", "fleet.yaml", node)[0] == 0
    assert navarch(tmp_path, "local", "tick", "fleet.yaml")[0] == 0
    code, out, err = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert code == 0, out + err
    pages = [r.json() for r in recorder.at("/pd")]
    assert [p["event_action"] for p in pages] == ["trigger", "resolve"]
    assert pages[1]["dedup_key"] == trigger["dedup_key"] and "payload" not in pages[1]
    state = json.loads((tmp_path / ".navarch/store/state/demo.notify.json").read_text())
    assert state["active"] == {}
