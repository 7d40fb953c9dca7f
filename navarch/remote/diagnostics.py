"""Active GPU diagnostics: run `dcgmi diag -r LEVEL -j` on a node and read DCGM's JSON.

The playbook is playbooks/diagnostics.yaml (or the pool's playbooks.diagnostics); this
module runs it over SSH and turns the last step's stdout into a DiagResult.

The pure parse of DCGM's JSON (both shapes, the verdicts, the levels) lives in
navarch.agent.acceptance_tools.dcgm, which the node agent's acceptance suite shares;
its names are re-exported here.

Detached runs (playbooks/diagnostics.yaml): a reconcile run never waits for dcgmi (level 3
takes about 15 minutes). The playbook starts it detached and prints `navarch-diag: started`
(or `navarch-diag: running` while it goes): a RUNNING result, no verdict yet; a later run's
playbook prints the JSON and `navarch-diag-exit: N` (dcgmi's exit status), read as if
dcgmi had run in the foreground. A playbook that runs dcgmi in the foreground works too.

Verdicts (doubt never acts: docs/design.md, Safety rules, rule 2): only `fail` is a fault; SSH
trouble is `error`, like a run that gives no verdict.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from navarch.agent.acceptance_tools.dcgm import (
    DIAG_LEVELS,
    DiagOutcome,
    DiagResult,
    DiagTest,
    parse_dcgmi_diag,
)
from navarch.remote.playbook import Playbook, PlaybookKind, load_playbook
from navarch.remote.runner import PlaybookTarget, SSHRunner
from navarch.report.acceptance import AcceptanceResult, AcceptanceStatus

__all__ = [
    "DIAG_LEVELS",
    "DiagOutcome",
    "DiagResult",
    "DiagTest",
    "diagnostics_playbook",
    "parse_dcgmi_diag",
    "read_acceptance_output",
    "read_step_output",
    "run_diagnostics",
]


def _tail(text: str, n: int = 200) -> str:
    return " ".join(text.split())[-n:]


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
    tests: tuple[str, ...] = (),
) -> DiagResult:
    """Run the diagnostics playbook for one node at `level` (1-3) and read the result.

    token: the name of the diagnostic (the executor's: when it started); the built-in
    playbook keeps each diagnostic's files under its name, so a result left by an earlier
    one (from before a remedy) is never collected as this one's. Letters and digits only.
    tests: the pool's diagnostics.tests (AcceptanceTest values); the built-in playbook then
    runs the node's `navarch agent acceptance --tests ...` instead of dcgmi diag, and the
    result is read_acceptance_output's. () for dcgmi diag alone.

    runner: the pool's SSHRunner (SSHRunner(pool.ssh, base_dir=fleet dir)); target: the
    node (reason e.g. "return to service after reboot"). The last step's stdout is parsed.
    Raises ValueError for a level outside DIAG_LEVELS or a test name that is not snake_case,
    and ConfigError as SSHRunner.run does;
    SSH trouble is an `error` result, never an exception.
    """
    if level not in DIAG_LEVELS:
        raise ValueError(f"dcgmi diag level must be one of {DIAG_LEVELS}, not {level!r}")
    if not re.fullmatch(r"[A-Za-z0-9]{0,32}", token):
        raise ValueError(f"diagnostic token must be letters and digits, not {token!r}")
    if not all(re.fullmatch(r"[a-z0-9_]{1,64}", t) for t in tests):
        raise ValueError(f"acceptance test names must be snake_case words, not {tests!r}")
    extra = {"level": level, "token": token or "0", "tests": ",".join(tests)}
    (outcome,) = runner.run(playbook, [target], extra=extra)
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


_ACCEPTANCE = re.compile(r'^\{"navarch_acceptance": ', re.MULTILINE)
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
    if _ACCEPTANCE.search(stdout) is not None:
        return read_acceptance_output(stdout, level=level)
    return parse_dcgmi_diag(
        stdout, level=level, exit_code=exit_code, output_tail=output_tail or stdout
    )


def read_acceptance_output(stdout: str, *, level: int) -> DiagResult:
    """The DiagResult of `navarch agent acceptance` output (a pool's diagnostics.tests run
    in a scheduled idle window): FAIL when a test failed, naming each with its figure and
    threshold; PASS when every test passed; ERROR when one is unknown (a missing tool or
    unreadable output gives no verdict) or the JSON does not parse. Each test becomes a
    DiagTest (category "acceptance"). Text from the node is capped. Never raises."""
    found = _ACCEPTANCE.search(stdout)
    line = stdout[found.start() :].splitlines()[0] if found is not None else ""
    try:
        results = [AcceptanceResult.from_json(r) for r in json.loads(line)["navarch_acceptance"]]
    except (KeyError, TypeError, ValueError) as exc:
        return DiagResult(level, DiagOutcome.ERROR, detail=f"acceptance output unreadable: {exc}")
    if not results:
        return DiagResult(level, DiagOutcome.ERROR, detail="acceptance ran no test")
    tests = tuple(
        DiagTest("acceptance", r.test[:64], r.status.value, messages=(r.reason[:300],))
        for r in results
    )
    failed = [r for r in results if r.status is AcceptanceStatus.FAIL]
    unknown = [r for r in results if r.status is AcceptanceStatus.UNKNOWN]
    if failed:
        outcome, words = DiagOutcome.FAIL, "failed: " + "; ".join(_line(r) for r in failed)
    elif unknown:
        outcome, words = DiagOutcome.ERROR, "no verdict: " + "; ".join(_line(r) for r in unknown)
    else:
        outcome, words = DiagOutcome.PASS, "passed: " + ", ".join(r.test for r in results)
    return DiagResult(level, outcome, tests, f"acceptance {words}"[:500])


def _line(r: AcceptanceResult) -> str:
    """One result: "nccl_all_reduce 120 GB/s (threshold 200 GB/s): reason"."""
    unit = f" {r.unit}" if r.unit else ""
    figure = f" {r.figure:g}{unit}" if r.figure is not None else ""
    limit = f" (threshold {r.threshold:g}{unit})" if r.threshold is not None else ""
    why = f": {r.reason}" if r.reason else ""
    return f"{r.test}{figure}{limit}{why}"[:300]
