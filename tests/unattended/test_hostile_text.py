"""Hostile text from a node's report, through every sink and every rendering.

A report signed with a node's own key is written by whoever holds root on that node. Its
free text must come out of navarch inert: no Slack control sequence, no Markdown that
breaks a fence or renders a link or image, no HTML, no terminal escape, no line a reader
would take for navarch's own, and nothing that crashes a sink.
"""

from __future__ import annotations

import io
import json
import logging
import re
import unicodedata
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch import logs
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import SinkSpec
from navarch.notify.events import Event, EventKind, make
from navarch.notify.sinks import LogSink, PagerDutySink, SlackSink, WebhookSink
from navarch.notify.status_page import render_status_page
from navarch.planner.model import Action, ActionKind, ActionReason, Halt, Memory, Plan
from navarch.reconcile.render import plan_to_json, render_markdown, render_text
from navarch.reconcile.reports import summarize
from navarch.reconcile.state import AuditLog
from navarch.stores.file import FileStore
from navarch.textsafe import NODE_TEXT_MAX_CHARS, markdown_inline, node_text
from tests.support.hostile import CORPUS, assert_plain, strings
from tests.support.reports import XID79, report_doc, xid_check
from tests.unattended.helpers import REPO, Recorder

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def hostile_report(text: str) -> dict[str, object]:
    """A report whose free text is `text` everywhere a node writes prose."""
    return report_doc(
        status="unhealthy",
        action="replace",
        health_score=10,
        checks=[xid_check(text).to_json()],
        xids=[replace(XID79, message=text, pci_bus_id="0000:5d:00").to_json()],
        gpus=[],
    )


def hostile_plan(text: str) -> Plan:
    """A plan quoting `text` as a report finding would (reason, halt, note, pending)."""
    return Plan(
        fleet="demo",
        created_at=NOW,
        actions=(
            Action(
                ActionKind.CORDON,
                "train",
                "demo-train-0001",
                f"XID 79: {text}",
                instance_id="i-1",
                action_reason=ActionReason.UNHEALTHY,
            ),
        ),
        halts=(Halt("train", "circuit_breaker", text),),
        notes=(text,),
        pending=(f"demo-train-0002: {text}",),
    )


def hostile_event(text: str) -> Event:
    return make(
        EventKind.NODE_CORDONED,
        "demo",
        "train",
        "demo-train-0001",
        f"demo-train-0001 cordoned: {text}",
        "run-1",
        reason=text,
    )


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_report_text_enters_as_one_short_plain_line(case: str) -> None:
    summary = summarize(hostile_report(CORPUS[case]))
    assert summary.findings
    for line in summary.findings:
        assert len(line) <= NODE_TEXT_MAX_CHARS
        assert "\n" not in line and "\r" not in line
        assert_plain(line)
        line.encode("utf-8")  # no lone surrogate left to crash a writer


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_text_plan_keeps_node_text_on_its_own_line_without_escapes(case: str) -> None:
    text = render_text(hostile_plan(CORPUS[case]))
    assert_plain(text)
    # The only summary line is navarch's own, last.
    assert [ln for ln in text.splitlines() if ln.startswith("Plan:")] == [
        "Plan: 0 to provision, 1 to cordon, 0 to drain, 0 to terminate."
    ]


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_markdown_plan_renders_nothing_active(case: str) -> None:
    text = render_markdown(hostile_plan(CORPUS[case]))
    assert_plain(text, markdown=True)
    fences = [ln for ln in text.splitlines() if ln.lstrip().startswith("```")]
    assert fences == ["```diff", "```"]  # the template's own fence, never closed early
    # Outside the fence (a code block shows its text as is) nothing can render live.
    outside = text.split("```diff")[0] + text.split("```\n")[-1]
    assert "<img" not in outside and "<script" not in outside and "<a " not in outside
    assert "<!channel>" not in outside and "<https://" not in outside
    assert not re.search(r"(?<!\\)\]\(", outside)  # no [label](url) or ![image](url)
    assert "://" not in outside and "www." not in outside  # GitHub autolinks nothing


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_json_plan_round_trips_hostile_text(case: str) -> None:
    doc = plan_to_json(hostile_plan(CORPUS[case]))
    assert json.loads(json.dumps(doc))["actions"][0]["node"] == "demo-train-0001"


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_status_page_escapes_node_text(case: str) -> None:
    spec = load_fleet(REPO / "fleet.example.yaml")
    page = render_status_page(spec, hostile_plan(CORPUS[case]), Memory(fleet="demo"), NOW)
    assert "<script" not in page and "<img" not in page and "<!channel>" not in page
    assert "<a href='//evil'>" not in page
    assert_plain(page)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_audit_log_stores_hostile_text_as_json(case: str, tmp_path: Path) -> None:
    store = FileStore(str(tmp_path))
    audit = AuditLog(store, "demo", "run-1", NOW)
    audit.append({"node": "demo-train-0001", "detail": CORPUS[case]})
    key = audit.flush()
    assert key is not None
    lines = store.get(key).data.decode("utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["node"] == "demo-train-0001"


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_log_lines_stay_one_line_per_record(case: str, fmt: str) -> None:
    stream = io.StringIO()
    logs.configure(fmt, "run-1", stream=stream)
    try:
        logging.getLogger("navarch.test").warning("node says %s", CORPUS[case])
    finally:
        logs.configure("text", "")
    out = stream.getvalue()
    assert out.count("\n") == 1
    assert_plain(out)
    if fmt == "json":
        assert json.loads(out)["level"] == "warning"


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_sink_delivers_hostile_text_inert(
    case: str, recorder: Recorder, tmp_path: Path
) -> None:
    event = hostile_event(CORPUS[case])
    slack = SinkSpec("slack", "s", url={"value": f"{recorder.url}/slack"}, retries=0)
    assert SlackSink(slack, tmp_path, 0).send((event,)) == 1
    (req,) = recorder.at("/slack")
    text = req.json()["text"]
    assert "<" not in text and ">" not in text  # no <!channel>, no <url|label>
    assert len(text) < 2_000 and len(text.splitlines()) == 2
    assert_plain(text)
    hook = SinkSpec(
        "webhook", "w", url={"value": f"{recorder.url}/hook"}, secret={"value": "k"}, retries=0
    )
    assert WebhookSink(hook, tmp_path, 1).send((event,)) == 1
    (req,) = recorder.at("/hook")
    assert req.json()["node"] == "demo-train-0001"
    for line in strings(req.json()):
        assert_plain(line)
    pd = SinkSpec(
        "pagerduty", "p", url={"value": f"{recorder.url}/pd"}, routing_key={"value": "r"}, retries=0
    )
    breaker = make(
        EventKind.BREAKER_TRIPPED, "demo", "train", None, CORPUS[case], "run-1", why=CORPUS[case]
    )
    assert PagerDutySink(pd, tmp_path, 2).send((breaker,)) == 1
    (req,) = recorder.at("/pd")
    assert len(req.json()["payload"]["summary"]) <= 1024
    for line in strings(req.json()):
        assert_plain(line)
    log = SinkSpec("log", "l", path="events.jsonl")
    assert LogSink(log, tmp_path).send((event,)) == 1
    (line,) = (tmp_path / "events.jsonl").read_text().splitlines()
    assert json.loads(line)["node"] == "demo-train-0001"


def test_no_format_tag_or_zero_width_character_passes_the_filter() -> None:
    """Every Unicode format character (Cf) the running Python knows, the whole tag block
    and the variation selectors leave node_text; the zero-width space markdown_inline adds
    to break an autolink stays (it is put in after the filter, at the exit)."""
    invisible = [
        chr(cp)
        for cp in range(0x110000)
        if unicodedata.category(chr(cp)) == "Cf"
        or 0xE0000 <= cp <= 0xE007F
        or 0xFE00 <= cp <= 0xFE0F
        or 0xE0100 <= cp <= 0xE01EF
    ]
    left = [
        f"U+{ord(c):04X}" for c in invisible if node_text(f"a{c}b").strip(" ") not in ("ab", "a b")
    ]
    assert not left
    assert node_text("a\u200bb\ufeffc\U000e0041d\u2060e") == "abcde"
    assert markdown_inline("see https://evil.example") == "see https:\u200b//evil.example"
