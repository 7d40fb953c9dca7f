"""Read `dcgmi diag -r LEVEL -j` (DCGM's JSON) into a DiagResult: the pure parse, shared by
the node agent's acceptance suite and the reconciler's scheduled diagnostics
(navarch.remote.diagnostics runs dcgmi over SSH and imports everything here).

DCGM's JSON (`dcgmi diag --json`; DCGM publishes no stable schema, so both shapes seen in
the field are read; names from DCGM's nvvs/include/NvvsJsonStrings.h and
testing/python3/dcgm_diag_schema.json):

  DCGM 4:  {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
              {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1,
               "entity_id": 0, "status": "Fail", "warnings": [{"warning": "...",
               "error_id": 83, "error_category": 10, "error_severity": 2}]}],
               "test_summary": {"status": "Fail"}}]}], "runtime_error": "..."},
            "entity_groups": [...], "metadata": {"version": "4.1.1", ...}}
  DCGM 3:  {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
              {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Fail",
               "warnings": [{"warning": "...", "error_id": 83}], "info": "..."}]}]}],
            "version": "3.3.5"}}

dcgmi may print a line before the JSON ("Successfully ran diagnostic for group."): the
document is read from the first ``{``. Verdicts (doubt never acts, docs/design.md, Safety rules,
rule 2): a test whose status is Fail makes the run `fail`. A node without dcgmi (the shell's
exit 127) is `unavailable`; a run that gives no verdict (host engine down,
`runtime_error`, output that is not DCGM's JSON) is `error`. Warn, Skip and Not Run
statuses are kept but never fail a run.

Levels (DCGM documentation, dcgmi diag --run): 1 quick deployment checks (seconds),
2 medium (about two minutes: + PCIe, GPU memory), 3 long (about 15 minutes: + stress,
power, memory bandwidth). Level 4 is not offered: it runs for hours.

Shipped in the agent bundle: Python 3.9, standard library and navarch's bundled modules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from navarch.report.compat import StrEnum
from navarch.textsafe import counted

__all__ = [
    "DIAG_LEVELS",
    "DiagOutcome",
    "DiagResult",
    "DiagTest",
    "parse_dcgmi_diag",
]

DIAG_LEVELS = (1, 2, 3)
_TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # DCGM 4, DCGM 3
_STATUS_RANK = {"pass": 0, "skip": 0, "not run": 0, "warn": 1, "fail": 2}
_NOT_INSTALLED_EXIT = 127  # POSIX shells: command not found

#: DCGM's error categories and severities (dcgmlib/dcgm_errors.h, dcgmErrorCategory_t and
#: dcgmErrorSeverity_t) that say a warning is a setting, not the hardware:
#: DCGM_FR_EC_SOFTWARE_CONFIG (3) always; DCGM_FR_EC_SOFTWARE_LIBRARY (4) and
#: DCGM_FR_EC_SOFTWARE_OTHER (8) when the severity is DCGM_ERROR_CONFIG (5, "This error
#: can be configured"), as "Persistence mode for GPU 0 is disabled" is (category 8,
#: severity 5). Hardware, XID, CUDA and EUD categories never are.
_SETTING_CATEGORY = 3
_SOFTWARE_CATEGORIES = (4, 8)
_CONFIG_SEVERITY = 5


def _is_setting(warning: Any) -> bool:
    """Whether one DCGM 4 warning object is a setting of the node by its own category."""
    if not isinstance(warning, Mapping):
        return False
    category, severity = warning.get("error_category"), warning.get("error_severity")
    return category == _SETTING_CATEGORY or (
        category in _SOFTWARE_CATEGORIES and severity == _CONFIG_SEVERITY
    )


class DiagOutcome(StrEnum):
    """The verdict of one diagnostics run; only FAIL is a fault."""

    PASS = "pass"
    FAIL = "fail"
    UNAVAILABLE = "unavailable"  # dcgmi not installed on the node
    ERROR = "error"  # it ran but gave no verdict (host engine down, SSH, bad output)
    RUNNING = "running"  # started detached on the node; a later run collects the verdict


@dataclass(frozen=True)
class DiagTest:
    """One DCGM test: its worst status over the entities it ran on (pass, warn, fail, skip,
    not run; lower case), the GPU indexes where it failed, and DCGM's warning texts.
    setting: it failed, and every warning of its failed results is a setting by DCGM's
    own category (``_is_setting``): the image, not the hardware."""

    category: str
    name: str
    status: str
    failed_gpus: tuple[int, ...] = ()
    messages: tuple[str, ...] = ()
    setting: bool = False


@dataclass(frozen=True)
class DiagResult:
    """One run of `dcgmi diag -r level`.

    detail: one line for status and the audit log; version: DCGM's version if it said.
    """

    level: int
    outcome: DiagOutcome
    tests: tuple[DiagTest, ...] = ()
    detail: str = ""
    version: str | None = None

    @property
    def fault(self) -> bool:
        """True when a test failed: the node keeps its cordon and climbs the ladder."""
        return self.outcome is DiagOutcome.FAIL

    @property
    def failed(self) -> tuple[DiagTest, ...]:
        return tuple(t for t in self.tests if t.status == "fail")

    @property
    def settings_only(self) -> bool:
        """True when it failed and every failed test failed only for settings."""
        return self.fault and all(t.setting for t in self.failed)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form, for Memory and `navarch status`."""
        return {
            "level": self.level,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "version": self.version,
            "tests": [
                {
                    "category": t.category,
                    "name": t.name,
                    "status": t.status,
                    "failed_gpus": list(t.failed_gpus),
                    "messages": list(t.messages),
                    **({"setting": True} if t.setting else {}),
                }
                for t in self.tests
            ],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DiagResult:
        """Inverse of to_json. Raises KeyError/ValueError on a malformed document."""
        return cls(
            level=int(d["level"]),
            outcome=DiagOutcome(d["outcome"]),
            detail=d.get("detail", ""),
            version=d.get("version"),
            tests=tuple(
                DiagTest(
                    t["category"],
                    t["name"],
                    t["status"],
                    tuple(t.get("failed_gpus", ())),
                    tuple(t.get("messages", ())),
                    bool(t.get("setting", False)),
                )
                for t in d.get("tests", ())
            ),
        )


def _gpu_of(result: Mapping[str, Any]) -> int | None:
    if "entity_id" in result:  # DCGM 4: only GPU entities carry a GPU index
        group = str(result.get("entity_group", "GPU")).upper()
        return int(result["entity_id"]) if group == "GPU" else None
    for key in ("gpu_id", "gpu_ids"):
        value = result.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    return None


def _test(category: str, raw: Mapping[str, Any]) -> DiagTest:
    statuses: list[str] = []
    failed: list[int] = []
    messages: list[str] = []
    # Each failed result's warnings, by whether DCGM files them as settings.
    setting_marks: list[bool] = []
    for r in raw.get("results") or ():
        status = str(r.get("status", "")).strip().lower()
        statuses.append(status)
        gpu = _gpu_of(r)
        if status == "fail" and gpu is not None:
            failed.append(gpu)
        if status == "fail":
            warnings = list(r.get("warnings") or ())
            setting_marks.extend(_is_setting(w) for w in warnings)
            if not warnings:
                setting_marks.append(False)  # a failure without a reason is no setting
        for w in r.get("warnings") or ():
            text = w.get("warning") if isinstance(w, Mapping) else str(w)
            if text:
                where = f"GPU {gpu}: " if gpu is not None else ""
                messages.append(f"{where}{str(text).strip()}")
    summary = (raw.get("test_summary") or {}).get("status")
    if summary:
        statuses.append(str(summary).strip().lower())
    worst = max(statuses, key=lambda s: _STATUS_RANK.get(s, 0), default="skip")
    return DiagTest(
        category,
        str(raw.get("name", "?")),
        worst,
        tuple(sorted(set(failed))),
        tuple(dict.fromkeys(messages)),
        setting=worst == "fail" and bool(setting_marks) and all(setting_marks),
    )


def _first_json_object(text: str) -> Any:
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the output")
    obj, _ = json.JSONDecoder().raw_decode(text[start:])
    return obj


def _tail(text: str, n: int = 200) -> str:
    return " ".join(text.split())[-n:]


def parse_dcgmi_diag(
    stdout: str, *, level: int, exit_code: int | None = 0, output_tail: str = ""
) -> DiagResult:
    """Read one `dcgmi diag -r level -j` run from its stdout and exit code.

    output_tail: stdout+stderr tail, for the detail of runs without a verdict. Returns a
    DiagResult (see the module docstring for the verdicts); never raises for bad output.
    """
    if exit_code == _NOT_INSTALLED_EXIT:
        return DiagResult(
            level,
            DiagOutcome.UNAVAILABLE,
            detail="dcgmi is not installed on the node (install NVIDIA DCGM, or "
            "set return_requires_diag: false)",
        )
    try:
        doc = _first_json_object(stdout)
    except ValueError:
        return DiagResult(
            level,
            DiagOutcome.ERROR,
            detail=f"dcgmi diag gave no JSON (exit {exit_code}): {_tail(output_tail or stdout)}",
        )
    body = next((doc[k] for k in _TOP_KEYS if isinstance(doc, dict) and k in doc), None)
    if not isinstance(body, dict):
        return DiagResult(
            level, DiagOutcome.ERROR, detail=f"not DCGM's diagnostic JSON: {_tail(json.dumps(doc))}"
        )
    version = body.get("version") or (doc.get("metadata") or {}).get("version")
    tests = tuple(
        _test(str(c.get("category", "")), t)
        for c in body.get("test_categories") or ()
        for t in c.get("tests") or ()
    )
    error = body.get("runtime_error")
    if not tests:
        why = error or "no test results"
        return DiagResult(level, DiagOutcome.ERROR, detail=f"dcgmi diag: {why}", version=version)
    failed = [t for t in tests if t.status == "fail"]
    if failed:
        parts = [
            f"{t.name}"
            + (f" on GPU {', '.join(map(str, t.failed_gpus))}" if t.failed_gpus else "")
            + (f" ({t.messages[0]})" if t.messages else "")
            for t in failed
        ]
        return DiagResult(
            level,
            DiagOutcome.FAIL,
            tests,
            f"dcgmi diag -r {level}: failed: " + "; ".join(parts),
            version,
        )
    warned = sum(t.status == "warn" for t in tests)
    note = f", {counted(warned, 'warning')}" if warned else ""
    return DiagResult(
        level,
        DiagOutcome.PASS,
        tests,
        f"dcgmi diag -r {level}: {counted(len(tests), 'test')} passed{note}",
        version,
    )
