"""The health report's types (navarch.report.health_report) and its JSON Schema say the same thing.

The schema (schemas/health-report.schema.json) is what the reconciler enforces; the
dataclasses are what the agent builds and the reconciler and tests read. Walked both
ways: every property is a field and every field a property, with the same JSON type,
the same nullability and enum values, and every required key always written.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pytest

from navarch.errors import ReportRejected
from navarch.planner.model import Memory
from navarch.reconcile.codec import (
    memory_from_json,
    memory_to_json,
    summary_from_json,
    summary_to_json,
)
from navarch.reconcile.reports import read_reports, summarize, verify_report
from navarch.report import signing
from navarch.report.health import FaultKey
from navarch.report.health_report import (
    REPORT_SCHEMA_VERSION,
    SIGNATURE_ALG,
    GpuReading,
    HealthReport,
    NoticeKind,
    NoticeSource,
    RejectReason,
    ReportCheck,
    ReportNotice,
    ReportSignature,
    ReportXid,
)
from navarch.resources import schema_path
from navarch.stores.file import FileStore
from tests.support.reports import health_report, report_doc, signed_report_bytes

SCHEMA = json.loads(schema_path("health-report.schema.json").read_text())
GOLDEN = Path(__file__).parent.parent / "agent" / "golden"
SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _resolve(node: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    merged = {**SCHEMA["$defs"][ref.rsplit("/", 1)[-1]], **node}
    del merged["$ref"]
    return merged


def _variants(node: Mapping[str, Any]) -> tuple[bool, Mapping[str, Any] | None]:
    """(null allowed, the non-null schema or None) of a property."""
    node = _resolve(node)
    if "oneOf" in node:
        nullable = any(v.get("type") == "null" for v in node["oneOf"])
        rest = [v for v in node["oneOf"] if v.get("type") != "null"]
        assert len(rest) <= 1, node
        return nullable, (_resolve(rest[0]) if rest else None)
    kinds = node.get("type")
    if isinstance(kinds, list):
        nullable = "null" in kinds
        others = [k for k in kinds if k != "null"]
        assert len(others) == 1, node
        return nullable, {**node, "type": others[0]}
    return False, node


def _optional(hint: Any) -> tuple[bool, Any]:
    """(Optional?, the type inside) of a field's type hint."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        assert len(inner) == 1, hint
        return True, inner[0]
    return False, hint


def _agree(path: str, hint: Any, node: Mapping[str, Any]) -> None:
    """Fail unless a (non-None) type hint and a schema node describe the same JSON."""
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Enum):
        values = node.get("enum", [node["const"]] if "const" in node else None)
        assert values is not None, f"{path}: {hint.__name__} but the schema has no enum"
        assert sorted(values) == sorted(m.value for m in hint), path
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        assert node.get("type") == "object", path
        _walk(path, hint, node)
    elif origin is tuple:
        assert node.get("type") == "array", path
        _agree(f"{path}[]", typing.get_args(hint)[0], _resolve(node["items"]))
    elif origin is Mapping or hint is Mapping:
        assert node.get("type") == "object" and "properties" not in node, path
    else:
        expected = {str: "string", int: "integer", float: "number", bool: "boolean"}[hint]
        if "const" in node:
            assert type(node["const"]).__name__ == hint.__name__, path
        else:
            assert node.get("type") == expected, f"{path}: {hint} but schema {node}"


def _walk(path: str, cls: type, node: Mapping[str, Any]) -> None:
    """Both ways over one object: names, required keys, and each field's type."""
    assert node.get("additionalProperties") is False, path
    props = node["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    assert sorted(fields) == sorted(props), f"{path}: fields and schema properties differ"
    required = set(node.get("required", ()))
    minimal = cls(**{n: _sample(hints[n]) for n, f in fields.items() if _no_default(f)})
    written = set(minimal.to_json()) if hasattr(minimal, "to_json") else set(fields)
    # A signature is added by signing (navarch.report.signing.sign_for_store), after to_json.
    assert required - {"signature"} <= written, f"{path}: a required key is not always written"
    for name, f in fields.items():
        if _no_default(f):
            assert name in required, (
                f"{path}.{name}: no default, but the schema does not require it"
            )
        optional, inner = _optional(hints[name])
        nullable, schema = _variants(props[name])
        if nullable:
            assert optional, f"{path}.{name}: the schema allows null, the type does not"
        elif optional and (cls, name) != (HealthReport, "signature"):
            # None means "left out": only a key the schema lets be absent may be (and the
            # signature, None until signed).
            assert name not in required and f.default is None, f"{path}.{name}"
            assert name not in minimal.to_json(), f"{path}.{name}: None must be left out"
        assert schema is not None, f"{path}.{name}"
        _agree(f"{path}.{name}", inner, schema)


def _no_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _sample(hint: Any) -> Any:
    """A value of a (required) field's type, for the minimal instance."""
    optional, inner = _optional(hint)
    if optional:
        return None
    if isinstance(inner, type) and issubclass(inner, Enum):
        return next(iter(inner))
    return {str: "x", int: 1, float: 1.0}[inner]


def test_the_schema_and_the_report_types_name_the_same_fields_types_and_required_keys() -> None:
    _walk("report", HealthReport, SCHEMA)
    # The parts the walk reached are the report's every part.
    checks = SCHEMA["properties"]["checks"]["items"]
    assert typing.get_type_hints(HealthReport)["checks"] == tuple[ReportCheck, ...]
    assert typing.get_type_hints(ReportCheck)["fault_key"] == FaultKey | None
    assert _variants(checks["properties"]["fault_key"])[1]["required"] == ["kind", "gpu_index"]
    assert typing.get_type_hints(HealthReport)["gpus"] == tuple[GpuReading, ...]
    assert typing.get_type_hints(HealthReport)["xids"] == tuple[ReportXid, ...]
    assert typing.get_type_hints(HealthReport)["notice"] == ReportNotice | None
    assert typing.get_type_hints(HealthReport)["signature"] == ReportSignature | None
    # The constants the schema pins.
    assert SCHEMA["properties"]["schema_version"]["const"] == REPORT_SCHEMA_VERSION
    assert SCHEMA["properties"]["signature"]["properties"]["alg"]["const"] == SIGNATURE_ALG
    assert SIGNATURE_ALG == signing.ALG


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_every_golden_agent_report_reads_into_the_types_and_back_to_the_same_signed_bytes(
    path: Path,
) -> None:
    for doc in json.loads(path.read_text()):
        report = HealthReport.from_json(doc)
        assert signing.canonical_bytes(report.to_json()) == signing.canonical_bytes(doc)


def test_the_shared_test_report_is_one_the_reconciler_accepts() -> None:
    data = signed_report_bytes(health_report(), SECRET)
    summary = verify_report(
        data,
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        fleet_secret=SECRET,
        last_sequence=0,
        now=NOW,
    )
    assert (summary.sequence, summary.status, summary.gpu_count) == (7, "healthy", 1)


def test_a_rejected_report_names_a_reject_reason_and_memory_saves_its_value(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    store.put(
        "health/demo/train/demo-train-0001.json", signed_report_bytes(health_report(), b"wrong")
    )
    observed = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    reason = observed["demo-train-0001"].rejected
    assert reason is RejectReason.BAD_SIGNATURE
    with pytest.raises(ReportRejected) as info:
        verify_report(
            store.get("health/demo/train/demo-train-0001.json").data,
            fleet="demo",
            pool="train",
            node="demo-train-0001",
            fleet_secret=SECRET,
            last_sequence=0,
            now=NOW,
        )
    assert info.value.reason is RejectReason.BAD_SIGNATURE
    # Serialised by its value, as status JSON and metrics labels always showed it.
    doc = memory_to_json(Memory(fleet="demo", rejections=((reason, 1),)))
    saved = orjson.loads(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    assert saved["rejections"] == {"bad_signature": 1}
    assert memory_from_json(saved).rejections == (("bad_signature", 1),)


def test_a_maintenance_notice_reaches_the_planner_as_a_notice_kind() -> None:
    notice = ReportNotice(
        NoticeKind.MAINTENANCE, NoticeSource.AWS, "2026-11-02T00:00:00.000Z", "reboot"
    )
    summary = summarize(report_doc(notice=notice.to_json()))
    assert summary.notice_kind is NoticeKind.MAINTENANCE
    assert summary.notice_deadline == datetime(2026, 11, 2, tzinfo=UTC)
    saved = summary_to_json(summary)
    assert saved is not None and orjson.loads(orjson.dumps(saved))["notice_kind"] == "maintenance"
    again = summary_from_json(orjson.loads(orjson.dumps(saved)))
    assert again is not None and again.notice_kind is NoticeKind.MAINTENANCE


def test_a_signed_report_with_an_acceptance_run_reaches_the_planner_plain_and_capped() -> None:
    from navarch.report.acceptance import (
        AcceptanceResult,
        AcceptanceRun,
        AcceptanceStatus,
        SuiteDepth,
    )

    hostile = "\x1b[31mslow\u202e" + "x" * 900
    run = AcceptanceRun(
        "boot-1",
        SuiteDepth.QUICK,
        "2026-11-01T11:59:00.000Z",
        "2026-11-01T11:59:30.000Z",
        results=(
            AcceptanceResult(
                "nccl_all_reduce",
                AcceptanceStatus.FAIL,
                120.0,
                200.0,
                "GB/s",
                reason=hostile,
                detail={"driver": hostile[:200]},
            ),
        ),
    )
    report = health_report(acceptance=run)
    # Both ways: the typed report's JSON reads back into the same report.
    assert HealthReport.from_json(report.to_json()) == report
    summary = verify_report(
        signed_report_bytes(report, SECRET),
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        fleet_secret=SECRET,
        last_sequence=0,
        now=NOW,
    )
    assert summary.acceptance is not None
    result = summary.acceptance.results[0]
    assert (result.figure, result.threshold, result.status) == (120.0, 200.0, AcceptanceStatus.FAIL)
    assert "\x1b" not in result.reason and "\u202e" not in result.reason
    assert len(result.reason) <= 300 and len(result.detail["driver"]) <= 80
    # Memory keeps it (the state document and the report cache).
    again = summary_from_json(orjson.loads(orjson.dumps(summary_to_json(summary))))
    assert again is not None and again.acceptance == summary.acceptance
