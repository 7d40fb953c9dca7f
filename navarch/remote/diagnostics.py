"""Active GPU diagnostics: run `dcgmi diag -r LEVEL -j` on a node and read DCGM's JSON.

The playbook is playbooks/diagnostics.yaml (or the pool's playbooks.diagnostics); this
module runs it over SSH and turns the last step's stdout into a DiagResult.

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

Detached runs (playbooks/diagnostics.yaml): a reconcile run never waits for dcgmi (level 3
takes about 15 minutes). The playbook starts it detached and prints `navarch-diag: started`
(or `navarch-diag: running` while it goes): a RUNNING result, no verdict yet; a later run's
playbook prints the JSON and `navarch-diag-exit: N` (dcgmi's exit status), read as if
dcgmi had run in the foreground. A playbook that runs dcgmi in the foreground works too.

Verdicts (doubt never acts, DESIGN.md safety rule 2): a test whose status is Fail makes
the run `fail` (a fault like any other). A node without dcgmi (the shell's exit 127) is
`unavailable`; a run that gives no verdict (host engine down, `runtime_error`, output that
is not DCGM's JSON, SSH failure) is `error`. Neither is a fault. Warn, Skip and Not Run
statuses are kept but never fail a run.

Levels (DCGM documentation, dcgmi diag --run): 1 quick deployment checks (seconds),
2 medium (about two minutes: + PCIe, GPU memory), 3 long (about 15 minutes: + stress,
power, memory bandwidth). Level 4 is not offered: it runs for hours.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from navarch.remote.playbook import Playbook, PlaybookKind, load_playbook
from navarch.remote.runner import PlaybookTarget, SSHRunner
from navarch.wording import counted

__all__ = [
    "DIAG_LEVELS",
    "DiagOutcome",
    "DiagResult",
    "DiagTest",
    "diagnostics_playbook",
    "parse_dcgmi_diag",
    "read_step_output",
    "run_diagnostics",
]

DIAG_LEVELS = (1, 2, 3)
_TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # DCGM 4, DCGM 3
_STATUS_RANK = {"pass": 0, "skip": 0, "not run": 0, "warn": 1, "fail": 2}
_NOT_INSTALLED_EXIT = 127  # POSIX shells: command not found


class DiagOutcome(enum.StrEnum):
    """The verdict of one diagnostics run; only FAIL is a fault."""

    PASS = "pass"
    FAIL = "fail"
    UNAVAILABLE = "unavailable"  # dcgmi not installed on the node
    ERROR = "error"  # it ran but gave no verdict (host engine down, SSH, bad output)
    RUNNING = "running"  # started detached on the node; a later run collects the verdict


@dataclass(frozen=True)
class DiagTest:
    """One DCGM test: its worst status over the entities it ran on (pass, warn, fail, skip,
    not run; lower case), the GPU indexes where it failed, and DCGM's warning texts."""

    category: str
    name: str
    status: str
    failed_gpus: tuple[int, ...] = ()
    messages: tuple[str, ...] = ()


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
    for r in raw.get("results") or ():
        status = str(r.get("status", "")).strip().lower()
        statuses.append(status)
        gpu = _gpu_of(r)
        if status == "fail" and gpu is not None:
            failed.append(gpu)
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


def diagnostics_playbook(scheduler: str, override_path: Path | None = None) -> Playbook:
    """The pool's diagnostics playbook: its playbooks.diagnostics file (resolved against
    fleet.yaml's directory) or the built-in playbooks/diagnostics.yaml.

    Raises ConfigError for a bad file (navarch.remote.playbook.load_playbook_file).
    """
    playbook = load_playbook(scheduler, PlaybookKind.DIAGNOSTICS, override_path=override_path)
    assert playbook is not None  # the built-in always exists for this kind
    return playbook


def run_diagnostics(
    runner: SSHRunner,
    playbook: Playbook,
    target: PlaybookTarget,
    level: int,
    *,
    token: str = "",
) -> DiagResult:
    """Run the diagnostics playbook for one node at `level` (1-3) and read the result.

    token: the name of the diagnostic (the executor's: when it started); the built-in
    playbook keeps each diagnostic's files under its name, so a result left by an earlier
    one (from before a remedy) is never collected as this one's. Letters and digits only.

    runner: the pool's SSHRunner (SSHRunner(pool.ssh, base_dir=fleet dir)); target: the
    node (reason e.g. "return to service after reboot"). The last step's stdout is parsed.
    Raises ValueError for a level outside DIAG_LEVELS and ConfigError as SSHRunner.run does;
    SSH trouble is an `error` result, never an exception.
    """
    if level not in DIAG_LEVELS:
        raise ValueError(f"dcgmi diag level must be one of {DIAG_LEVELS}, not {level!r}")
    if not re.fullmatch(r"[A-Za-z0-9]{0,32}", token):
        raise ValueError(f"diagnostic token must be letters and digits, not {token!r}")
    (outcome,) = runner.run(playbook, [target], extra={"level": level, "token": token or "0"})
    if not outcome.steps:
        return DiagResult(level, DiagOutcome.ERROR, detail=outcome.error or "no step ran")
    step = outcome.steps[-1]
    if step.exit_code is None:
        return DiagResult(
            level,
            DiagOutcome.ERROR,
            detail=outcome.error or f"{step.host}: {_tail(step.output_tail)}",
        )
    if len(outcome.steps) < len(playbook.steps):  # an earlier step of the playbook failed
        return DiagResult(level, DiagOutcome.ERROR, detail=outcome.error or "a step failed")
    return read_step_output(
        step.stdout, level=level, exit_code=step.exit_code, output_tail=step.output_tail
    )


_MARK = re.compile(r"^navarch-diag: (started|running)\s*$", re.MULTILINE)
_EXIT = re.compile(r"^navarch-diag-exit: (-?\d+)\s*$", re.MULTILINE)


def read_step_output(
    stdout: str, *, level: int, exit_code: int | None, output_tail: str = ""
) -> DiagResult:
    """The DiagResult of the diagnostics step's stdout: RUNNING for the detached playbook's
    `navarch-diag: started|running`; else DCGM's JSON, with dcgmi's exit status from a
    `navarch-diag-exit: N` line when the playbook collected a detached run (the step's own
    exit status otherwise). Never raises."""
    mark = _MARK.search(stdout)
    if mark is not None:
        return DiagResult(level, DiagOutcome.RUNNING, detail=f"dcgmi diag -r {level} {mark[1]}")
    collected = _EXIT.search(stdout)
    if collected is not None:
        exit_code = int(collected[1])
        stdout = stdout[: collected.start()]
    return parse_dcgmi_diag(
        stdout, level=level, exit_code=exit_code, output_tail=output_tail or stdout
    )
