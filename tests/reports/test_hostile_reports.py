"""No report can crash a run.

A corpus of hostile report objects, each stored under a node's key in a file:// store and
read through read_reports: every one is rejected with a reason (counted by observe() into
Memory.rejections, which `navarch status` prints), and nothing raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navarch.errors import StoreError
from navarch.planner.model import Memory
from navarch.reconcile import reports as reports_module
from navarch.reconcile.reports import MAX_REPORT_BYTES, REJECT_REASONS, read_reports
from navarch.report import signing
from navarch.stores.base import Blob
from navarch.stores.file import FileStore
from tests.support.reports import report_doc

SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NODE = "demo-train-0001"
KEY = f"health/demo/train/{NODE}.json"


def _report(**over: object) -> dict:
    return report_doc(**over)


def _signed(report: dict) -> dict:
    return signing.sign(report, signing.derive_node_key(SECRET, "demo", NODE))


def _zeros(report: dict) -> bytes:
    """A report with a well-formed but made-up signature, serialised without JCS."""
    return json.dumps({**report, "signature": {"alg": "HMAC-SHA256", "value": "0" * 64}}).encode()


def _deep_inside(depth: int) -> bytes:
    text = json.dumps(_signed(_report()))
    return text.replace('"checks": []', '"checks": ' + "[" * depth + "]" * depth).encode()


#: name -> (stored bytes, the rejection reason expected)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "deep_nesting_100kb": (b"[" * 100_000, "malformed"),
    "deep_nesting_objects": (b'{"a":' * 30_000 + b"1" + b"}" * 30_000, "malformed"),
    "deep_nesting_inside_a_report": (_deep_inside(5_000), "malformed"),
    "moderate_nesting_inside_a_report": (_deep_inside(500), "malformed"),
    "shallow_nesting_inside_a_report": (_deep_inside(3), "schema"),
    "lone_surrogate": (
        _zeros(
            _report(
                checks=[
                    {
                        "name": "temperature",
                        "status": "degraded",
                        "action": "none",
                        "message": "\ud800",
                    }
                ]
            )
        ),
        "malformed",
    ),
    "lone_surrogate_in_a_key": (_zeros({**_report(), "\udfff": 1}), "malformed"),
    "huge_integer_4k_digits": (
        json.dumps(_signed(_report()))
        .replace('"sequence": 7', '"sequence": ' + "9" * 5000)
        .encode(),
        "malformed",
    ),
    "integer_beyond_2_53": (_zeros(_report(sequence=10**30)), "malformed"),
    "float_overflow_to_inf": (
        json.dumps(_signed(_report()))
        .replace('"utilization_pct": 40.0', '"utilization_pct": 1e999')
        .encode(),
        "malformed",
    ),
    "nan_literal": (
        json.dumps(_signed(_report()))
        .replace('"utilization_pct": 40.0', '"utilization_pct": NaN')
        .encode(),
        "malformed",
    ),
    "negative_infinity_literal": (b'{"sequence": -Infinity}', "malformed"),
    "ten_megabytes": (b'{"pad": "' + b"x" * (10 * 1024 * 1024) + b'"}', "oversized"),
    "just_over_the_limit": (b" " * (MAX_REPORT_BYTES + 1) + b"{}", "oversized"),
    "empty_object": (b"", "malformed"),
    "json_null": (b"null", "malformed"),
    "json_string": (b'"healthy"', "malformed"),
    "json_number": (b"42", "malformed"),
    "json_array_of_reports": (json.dumps([_signed(_report())]).encode(), "malformed"),
    "invalid_utf8": (b'{"fleet": "\xff\xfe"}', "malformed"),
    "utf8_bom": (("\ufeff" + json.dumps(_signed(_report()))).encode(), "malformed"),
    "truncated": (json.dumps(_signed(_report())).encode()[:-10], "malformed"),
    "sequence_as_string": (json.dumps(_signed(_report(sequence="7"))).encode(), "schema"),
    "gpus_as_object": (json.dumps(_signed(_report(gpus={"0": {}}))).encode(), "schema"),
    "fleet_as_number": (json.dumps(_signed(_report(fleet=5))).encode(), "schema"),
    "signature_as_string": (json.dumps({**_report(), "signature": "0" * 64}).encode(), "schema"),
    "bool_health_score": (json.dumps(_signed(_report(health_score=True))).encode(), "schema"),
    "impossible_date": (
        json.dumps(_signed(_report(generated_at="2026-13-45T99:00:00Z"))).encode(),
        "schema",
    ),
    "unsigned": (json.dumps(_report()).encode(), "unsigned"),
    "forged_signature": (_zeros(_report()), "bad_signature"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_report_is_rejected_with_a_reason(tmp_path, name):
    data, reason = HOSTILE[name]
    store = FileStore(tmp_path)
    store.put(KEY, data)
    observed = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    assert observed[NODE].rejected == reason
    assert observed[NODE].summary is None
    assert reason in REJECT_REASONS


def test_whole_corpus_in_one_store_is_read_without_a_traceback(tmp_path):
    """One listing holding every hostile object at once (one per node) and one good report:
    the good one is accepted, every other one is rejected with its reason."""
    store = FileStore(tmp_path)
    expected: dict[str, str] = {}
    for i, name in enumerate(sorted(HOSTILE), start=2):
        node = f"demo-train-{i:04d}"
        data, reason = HOSTILE[name]
        store.put(f"health/demo/train/{node}.json", data)
        expected[node] = reason
    store.put(KEY, json.dumps(_signed(_report())).encode())
    observed = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    assert observed[NODE].rejected is None and observed[NODE].summary.sequence == 7
    # Identity is checked after the schema and before the signature: a node's object
    # signed for another node is "identity"; the corpus was made for NODE, so objects that
    # pass the schema now fail identity instead of their own reason.
    got = {node: observed[node].rejected for node in expected}
    assert all(
        got[n] == r or (got[n] == "identity" and r in ("unsigned", "bad_signature"))
        for n, r in expected.items()
    ), got


def test_signature_covers_the_canonical_form_not_one_serialisation():
    """RFC 8785: the same report written with other whitespace, key order and number
    spelling verifies; a changed value does not."""
    signed = _signed(_report())
    store_bytes = json.dumps(signed, indent=3, sort_keys=False).replace("40.0", "4.0e1").encode()
    doc = json.loads(store_bytes)
    key = signing.derive_node_key(SECRET, "demo", NODE)
    assert signing.verify(doc, key)
    assert not signing.verify({**doc, "health_score": 99}, key)
    with pytest.raises(ValueError):
        signing.sign(_report(sequence=2**60), key)


class _Flaky:
    """A store whose get() fails for one key (a backend error) and works for the rest."""

    def __init__(self, store: FileStore, bad_key: str, error: Callable[[], Exception]) -> None:
        self._store, self._bad, self._error = store, bad_key, error
        self.url, self.parallel_gets = store.url, 1

    def list(self, prefix: str):
        return self._store.list(prefix)

    def get(self, key: str) -> Blob:
        if key == self._bad:
            raise self._error()
        return self._store.get(key)


@pytest.mark.parametrize("error", [lambda: StoreError("torn object"), lambda: OSError(5, "EIO")])
def test_unreadable_report_is_a_rejection(tmp_path, error):
    store = FileStore(tmp_path)
    store.put(KEY, json.dumps(_signed(_report())).encode())
    other = "health/demo/train/demo-train-0002.json"
    store.put(other, json.dumps(_signed(_report())).encode())
    observed = read_reports(_Flaky(store, KEY, error), "demo", Memory(fleet="demo"), SECRET, NOW)
    assert observed[NODE].rejected == "unreadable"
    assert observed["demo-train-0002"].rejected == "identity"  # read, checked, own reason


def test_a_failing_check_is_a_rejection(tmp_path, monkeypatch):
    """A bug in a check (here: summarising raises) rejects that report, not the run."""
    store = FileStore(tmp_path)
    store.put(KEY, json.dumps(_signed(_report())).encode())

    def broken(report, stored_at=None):
        raise KeyError("pci_bus_id")

    monkeypatch.setattr(reports_module, "summarize", broken)
    observed = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    assert observed[NODE].rejected == "check_failed"


def test_an_unchanged_rejected_object_stays_rejected_and_is_counted_once(tmp_path):
    """The next run does not fetch the same object again, and still sees it rejected
    (not as a node that never reported, which would be judged against boot_timeout)."""
    import shutil
    from pathlib import Path

    from navarch.fleet.load import load_fleet
    from navarch.inventory import Instance, InstanceState, launch_id, ownership_tags
    from navarch.planner.observe import observe

    shutil.copy(Path(__file__).resolve().parents[2] / "fleet.example.yaml", tmp_path / "fleet.yaml")
    spec = load_fleet(tmp_path / "fleet.yaml")
    inst = Instance(
        provider="sim",
        instance_id="i-1",
        zone="sim-1a",
        instance_type="sim-h100x8",
        state=InstanceState.RUNNING,
        launched_at=NOW,
        tags=tuple(
            sorted(ownership_tags("demo", "train", NODE, launch_id("demo", NODE, 0)).items())
        ),
    )
    store = FileStore(tmp_path / "store")
    store.put(KEY, b"[" * 100_000)
    memory = Memory(fleet="demo")
    for _ in range(3):
        reports = read_reports(store, "demo", memory, SECRET, NOW)
        assert reports[NODE].rejected == "malformed"
        memory = observe(spec, [inst], reports, memory, NOW).memory
    assert dict(memory.rejections) == {"malformed": 1}


def test_a_report_signed_over_a_form_other_than_rfc_8785_is_rejected(tmp_path):
    """Only the JCS form is signed and verified: json.dumps(sort_keys) of the same body,
    which differs from JCS for a float such as 40.0, is a bad signature."""
    import hashlib
    import hmac

    report = _report()  # holds a float (40.0), where the two forms differ
    body = json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert body.encode() != signing.canonical_bytes(report)
    key = signing.derive_node_key(SECRET, "demo", NODE)
    other = {
        **report,
        "signature": {
            "alg": "HMAC-SHA256",
            "value": hmac.new(key, body.encode(), hashlib.sha256).hexdigest(),
        },
    }
    store = FileStore(tmp_path)
    store.put(KEY, json.dumps(other).encode())
    rejected = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)[NODE].rejected
    assert rejected == "bad_signature"
    store.put(KEY, json.dumps(signing.sign(report, key)).encode())
    assert read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)[NODE].rejected is None


@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "with_escapes"])
def test_brackets_inside_a_string_are_not_nesting(tmp_path, escaped):
    """A message full of brackets (a node's text is anything) is a string, not structure:
    the report is accepted, with or without JSON escapes around the brackets."""
    text = ('\\"' if escaped else "") + "[{" * 40
    check = {
        "name": "readings",
        "status": "healthy",
        "action": "none",
        "message": text,
        "gpu_index": 0,
        "evidence": {"note": text},
        "fault_key": None,
    }
    doc = _signed(_report(checks=[check]))
    store = FileStore(tmp_path)
    store.put(KEY, json.dumps(doc).encode())
    observed = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)[NODE]
    assert observed.rejected is None


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_nesting_of_a_json_text_is_the_depth_of_its_value(value):
    data = json.dumps(value).encode()
    assert reports_module._nesting(data, limit=1000) == _depth(value)
