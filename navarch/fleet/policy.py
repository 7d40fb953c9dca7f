"""Health policy rules: CEL expressions over a verified health report.

A rule is ``{name, when, status, action}``: ``when`` is a CEL expression (Common Expression
Language, https://cel.dev) over the report's evaluation context (see ``report_context``);
``status`` is healthy | degraded | unhealthy and ``action`` none | reset_gpu | reboot |
replace. docs/health-policy.md is the user's page; this is the contract:

- Rules are compiled when fleet.yaml is loaded (``compile_rule``). A syntax error, a name
  the context does not have, a comparison of incompatible types, or an expression that does
  not give true or false is a ConfigError naming the rule and what is wrong. To find the
  last three, every rule is tried once on two sample reports (SAMPLE_REPORT with a notice,
  and the same report without one): CEL here has no static type checker.
- ``evaluate(rule_sets, report)``: in each rule set (a pool's own ``health.rules``, then the
  fleet-wide ``health.rules``) the first rule whose ``when`` is true matches. The result is
  the worst status and the strongest action over the matches. When no rule of any set
  matches, the built-in rules (default_rules(): the agent's own status, a latched fatal
  XID) set the status, first match; when none of them matches either (the agent said
  ``unknown``), the agent's status stands. A built-in rule never sets an action: the
  result then keeps the report's (the catalogue's recommendation). Rules do not choose
  the remedy a node gets: the planner's ladder does (navarch.planner.ladder), with a
  rule's or the catalogue's action as the cheapest rung it may start from.
- Doubt never acts (docs/design.md, Safety rules, rule 2): a rule that raises at evaluation (a null
  reading compared with a number, an index past the end, ...) does not match, as if it were
  not there; the error is carried in PolicyResult.error for ``navarch status``.

The CEL implementation is common-expression-language (PyPI; Rust ``cel`` crate bindings):
about 0.02 ms per rule against about 0.7 ms for the pure-Python cel-python, and the
reconciler evaluates every changed report on every run (10,000 nodes report every minute).
Its known deviation from the CEL spec: ``exists``/``all`` do not absorb an error from one
element when another decides the result, so ``gpus.exists(g, g.temperature_c >= 85.0)``
raises when one GPU's temperature is null; guard readings with ``g.temperature_c != null``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from navarch.errors import ConfigError
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import (
    GpuReading,
    HealthReport,
    NoticeKind,
    NoticeSource,
    ReportCheck,
    ReportNotice,
    ReportXid,
    XidKind,
)
from navarch.report.xid import Severity

__all__ = [
    "PolicyResult",
    "Rule",
    "SAMPLE_REPORT",
    "compile_rule",
    "default_rule_data",
    "default_rules",
    "evaluate",
    "report_context",
]


@dataclass(frozen=True)
class Rule:
    """One compiled rule. where: "file:line" of its `when` for messages ("" for built-ins).
    action: the remedy a user rule recommends for the fault (the ladder's floor, as the
    catalogue's is); None for the built-in rules, which set a status only. builtin: one of
    default_rules() (its name prefixed "builtin:" for people), not a fleet.yaml rule."""

    name: str
    when: str
    status: Status
    action: Remedy | None
    where: str = ""
    program: Any = field(default=None, compare=False, repr=False, hash=False)
    #: rule_cost(when): the most list elements one evaluation may visit (see rule_cost).
    cost: int = field(default=0, compare=False)
    builtin: bool = False

    def test(self, context: Any) -> bool:
        """True when `when` holds on context (a report_context(), or a cel.Context built
        from one: evaluate() converts a report once for all its rules).

        Raises RuleEvalError when the expression raises or gives something else than a bool.
        """
        try:
            value = self.program.execute(context)
        except BaseException as exc:  # pyo3 panics derive from BaseException
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            raise RuleEvalError(_eval_message(exc)) from exc
        if not isinstance(value, bool):
            raise RuleEvalError(f"`when` gave {type(value).__name__} {value!r}, not true or false")
        return value


class RuleEvalError(Exception):
    """A rule's expression raised on one report (internal: evaluate() carries it as text)."""


@dataclass(frozen=True)
class PolicyResult:
    """What the rules make of one report.

    status: the node's Status; action: the recommended Remedy (a user rule's, else the
    report's: the catalogue's); matched: the rules that matched, the pool's first (a
    built-in one when no fleet.yaml rule did), () when the agent's own status stood;
    error: "rule NAME: what raised" for every rule that raised on this report
    ("; "-joined), or None.
    """

    status: Status
    action: Remedy
    matched: tuple[Rule, ...] = ()
    error: str | None = None

    @property
    def user_rules(self) -> tuple[Rule, ...]:
        """The matched rules that fleet.yaml declares (built-in ones left out)."""
        return tuple(r for r in self.matched if not r.builtin)

    @property
    def rule(self) -> str | None:
        """The matched rules' names as one line for people ("hot-gpu, reboot-it";
        built-in ones read "builtin:..."), None when the agent's own status stood."""
        return ", ".join(r.name for r in self.matched) or None


# --- evaluation context ----------------------------------------------------------------

_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci_bus_id",
    "temperature_c",
    "power_w",
    "memory_used_bytes",
    "memory_total_bytes",
    "utilization_pct",
    "process_count",
)
_FLOAT_GPU_FIELDS = frozenset({"temperature_c", "power_w", "utilization_pct"})
_XID_FIELDS = (
    "code",
    "kind",
    "pci_bus_id",
    "time",
    "boot_id",
    "severity",
    "action",
    "message",
    "count",
)
_CHECK_FIELDS = ("name", "status", "action", "message", "gpu_index", "fault_key")
_NOTICE_FIELDS = ("kind", "source", "deadline", "detail")


def _reading(name: str, value: Any) -> Any:
    # JSON writes 88.0 as 88 at times; CEL does not mix int and double in arithmetic, so
    # readings measured in C, W and % are always doubles. NaN/inf are not readings.
    if name in _FLOAT_GPU_FIELDS and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    return value


def report_context(report: Mapping[str, Any]) -> dict[str, Any]:
    """The variables a rule's `when` sees, built from a verified report (the shape of
    schemas/health-report.schema.json):

      status, action     the agent's overall status and strongest action (strings)
      health_score       int 0..100
      node, pool         strings
      checks             list of {name, status, action, message, gpu_index (int or null),
                         fault_key (null or {kind, gpu_index})}
      gpus               list of {index, uuid, name, pci_bus_id, temperature_c, power_w,
                         memory_used_bytes, memory_total_bytes, utilization_pct,
                         process_count}; a reading the agent could not take is null;
                         temperature_c, power_w, utilization_pct are doubles
      xids               list of {code, kind (xid|sxid), pci_bus_id, time, boot_id,
                         severity (ignore|warning|fatal), action, message, count}
      notice             null, or {kind (preemption|maintenance), source, deadline, detail}

    Every listed key is present (null when the report omits it), so a rule never fails on a
    missing optional field.
    """
    notice = report.get("notice")
    return {
        "status": report.get("status", "unknown"),
        "action": report.get("action", "none"),
        "health_score": report.get("health_score", 0),
        "node": report.get("node", ""),
        "pool": report.get("pool", ""),
        "checks": [{k: c.get(k) for k in _CHECK_FIELDS} for c in report.get("checks", ())],
        "gpus": [{k: _reading(k, g.get(k)) for k in _GPU_FIELDS} for g in report.get("gpus", ())],
        "xids": [
            {
                **{k: x.get(k) for k in _XID_FIELDS},
                "kind": x.get("kind") or "xid",
                "count": x.get("count") or 1,
            }
            for x in report.get("xids", ())
        ],
        "notice": {k: notice.get(k) for k in _NOTICE_FIELDS}
        if isinstance(notice, Mapping)
        else None,
    }


#: A report with every field set (one GPU, one check, one XID, a notice): compile_rule
#: tries every rule on it, and on it without the notice, to find type and name errors.
SAMPLE_REPORT: Mapping[str, Any] = HealthReport(
    fleet="sample",
    pool="sample",
    node="sample-sample-0001",
    instance_id="i-sample",
    boot_id="b",
    agent_version="0",
    sequence=1,
    generated_at="2026-01-01T00:00:00Z",
    status=Status.UNHEALTHY,
    action=Remedy.REBOOT,
    health_score=60,
    checks=(
        ReportCheck(
            "xid",
            Status.UNHEALTHY,
            Remedy.REBOOT,
            "XID 79: GPU has fallen off the bus",
            0,
            fault_key=FaultKey("xid:79", 0),
        ),
    ),
    gpus=(
        GpuReading(
            index=0,
            uuid="GPU-00000000",
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="0000:18:00.0",
            temperature_c=40.0,
            power_w=100.0,
            memory_used_bytes=0,
            memory_total_bytes=85899345920,
            utilization_pct=0.0,
            process_count=0,
        ),
    ),
    xids=(
        ReportXid(
            code=79,
            kind=XidKind.XID,
            pci_bus_id="0000:18:00.0",
            time="2026-01-01T00:00:00Z",
            boot_id="b",
            severity=Severity.FATAL,
            action=Remedy.REBOOT,
            message="GPU has fallen off the bus",
        ),
    ),
    notice=ReportNotice(NoticeKind.MAINTENANCE, NoticeSource.AWS, "2026-01-01T00:00:00Z", "sample"),
).to_json()


# --- cost --------------------------------------------------------------------------------

#: The longest list a verified report may hold (health-report.schema.json: checks maxItems
#: 512, xids 256, gpus 64): the cost model's length of every list a rule iterates.
MAX_LIST_ITEMS = 512
#: Comprehension macros -> how many list lengths one call costs at its nesting depth. The
#: CEL library (common-expression-language 0.10, no cost limit of its own) runs filter() in
#: time quadratic in the list's length: 540 ms for 256 XIDs, where exists() takes 0.3 ms.
_MACRO_LEVELS = {"exists": 1, "all": 1, "exists_one": 1, "map": 1, "filter": 2}
#: The most a rule may cost: eight comprehensions over a whole list, none inside another.
RULE_COST_MAX = 8 * MAX_LIST_ITEMS
#: The most all rules one report meets (a pool's own and the fleet's) may cost together.
REPORT_COST_MAX = 32 * MAX_LIST_ITEMS
#: A report with more list items than this is converted for CEL once, not per reference.
EAGER_CONTEXT_ITEMS = 64
#: Longest `when`, in characters.
RULE_MAX_CHARS = 2000

_CEL_STRING = re.compile(
    r"'''.*?'''" + r'|""".*?"""' + r"|'(?:\\.|[^'\\])*'" + r'|"(?:\\.|[^"\\])*"', re.S
)
_CEL_CALL = re.compile(r"\.\s*(exists_one|exists|all|map|filter)\s*\(|\(|\)")


def rule_cost(when: str) -> tuple[int, int]:
    """(cost, depth) of a CEL expression, read from its text before it ever runs.

    Every comprehension macro (exists, all, exists_one, map: one level; filter: two) at
    nesting depth d costs MAX_LIST_ITEMS**d list elements visited; cost is their sum and
    depth the deepest nesting. String literals are skipped. This is an upper bound of the
    work one evaluation does (CEL has no loops but these macros), so a rule under
    RULE_COST_MAX cannot stall a run however large the report it meets.
    """
    text = _CEL_STRING.sub('""', when)
    opened: list[int] = []  # levels each open parenthesis added
    levels = cost = deepest = 0
    for m in _CEL_CALL.finditer(text):
        if m.group(0) == ")":
            levels -= opened.pop() if opened else 0
        elif m.group(0) == "(":
            opened.append(0)
        else:
            add = _MACRO_LEVELS[m.group(1)]
            levels += add
            opened.append(add)
            cost += MAX_LIST_ITEMS**levels
            deepest = max(deepest, levels)
    return cost, deepest


# --- compiling ---------------------------------------------------------------------------

_PARSE_POS = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")


def _parse_message(exc: Exception) -> tuple[int | None, str]:
    """(line within the expression, message) from the cel crate's parse error text."""
    text = str(exc)
    m = _PARSE_POS.search(text)
    if m is None:
        return None, text.splitlines()[0] if text else type(exc).__name__
    return int(
        m.group(1)
    ), f"{m.group(3).strip()} (line {m.group(1)}, column {m.group(2)} of the expression)"


def _eval_message(exc: BaseException) -> str:
    text = str(exc).split(". ")[0].strip() or type(exc).__name__
    if isinstance(exc, KeyError):
        return f"no field {text} in the report context"
    if "overload" in text:
        return f"{text} (a null reading, or int mixed with double?)"
    return text


# Evaluation errors that depend on the data (an index past the end, a division by zero),
# not on the rule: the samples cannot tell those apart from a real mistake.
_DATA_DEPENDENT = (IndexError, ZeroDivisionError, OverflowError)


@dataclass(frozen=True)
class _RuleSite:
    """Where a rule being compiled stands, so each check's error names it alike."""

    name: str
    file: str | None
    line: int | None
    key_path: str | None

    def error(self, message: str, hint: str, expr_line: int | None = None) -> ConfigError:
        """The ConfigError for this rule (expr_line: the line within `when`, counted from 1)."""
        line = self.line
        at = line + expr_line - 1 if line is not None and expr_line else line
        return ConfigError(
            f"rule {self.name!r}: {message}",
            file=self.file,
            line=at,
            key_path=self.key_path,
            hint=hint,
        )


def compile_rule(
    name: str,
    when: str,
    status: str,
    action: str | None = "none",
    *,
    file: str | None = None,
    line: int | None = None,
    key_path: str | None = None,
) -> Rule:
    """Compile one rule and try it on SAMPLE_REPORT with and without its notice.

    file/line/key_path: where the rule's `when` is, for the error. Returns the Rule.
    Raises ConfigError (naming the rule, and the expression's line and column for a syntax
    error) when the expression does not parse, uses a name the context lacks, mixes types
    (CEL's "no such overload"), or gives something else than true or false on a sample.
    """
    import cel  # the reconciler's dependency only: the agent never loads fleet.yaml

    where = f"{file}:{line}" if file and line else (file or "")
    site = _RuleSite(name, file, line, key_path)
    rule_status, remedy = _rule_outcome(site, status, action)
    cost = _rule_size(site, when)
    try:
        program = cel.compile(when)
    except Exception as exc:  # the crate raises ValueError for every parse error
        expr_line, message = _parse_message(exc)
        raise site.error(
            f"CEL syntax error: {message}", "fix the expression in `when`", expr_line
        ) from exc
    rule = Rule(name, when, rule_status, remedy, where, program, cost)
    _try_on_samples(site, rule)
    return rule


def _rule_outcome(site: _RuleSite, status: str, action: str | None) -> tuple[Status, Remedy | None]:
    """The status and remedy a rule sets; the agent's unknown and the app's restart refused."""
    try:
        rule_status = Status(status)
        remedy = Remedy(action) if action is not None else None
    except ValueError as exc:
        raise site.error(
            str(exc), "status: healthy|degraded|unhealthy; action: none|reset_gpu|reboot|replace"
        ) from exc
    if rule_status is Status.UNKNOWN:
        raise site.error(
            "status unknown is for the agent to say", "use healthy, degraded or unhealthy"
        )
    if remedy is Remedy.RESTART_APP:
        raise site.error(
            "action restart_app is the application's to take, not a rung of the ladder",
            "action: none|reset_gpu|reboot|replace",
        )
    return rule_status, remedy


def _rule_size(site: _RuleSite, when: str) -> int:
    """The rule's cost (rule_cost), once its length and cost are within the limits."""
    if len(when) > RULE_MAX_CHARS:
        raise site.error(
            f"`when` is {len(when)} characters long, more than {RULE_MAX_CHARS}",
            "split it into several rules",
        )
    cost, depth = rule_cost(when)
    if cost > RULE_COST_MAX:
        raise site.error(
            f"`when` may visit {cost:,} list elements per report (comprehension nesting "
            f"level {depth}; filter() counts two), more than the {RULE_COST_MAX:,} a rule "
            "may cost",
            "iterate one list at a time: no exists/all/map inside another, no filter() "
            "(use exists, all or map(...).size()), at most 8 of them in one rule",
        )
    return cost


def _try_on_samples(site: _RuleSite, rule: Rule) -> None:
    """Run the rule on SAMPLE_REPORT with and without its notice; an error that depends on
    the data only is let through, any other fails the rule."""
    quiet = {**SAMPLE_REPORT, "notice": None}
    for sample, label in (
        (SAMPLE_REPORT, "a sample report"),
        (quiet, "a sample report without a notice"),
    ):
        try:
            rule.test(report_context(sample))
        except RuleEvalError as exc:
            cause = exc.__cause__
            if isinstance(cause, _DATA_DEPENDENT):
                continue
            hint = (
                "guard with `notice != null && ...`"
                if sample is quiet
                else "names: status, action, health_score, node, pool, checks, gpus, xids, "
                "notice (see docs/health-policy.md); CEL does not mix int and double"
            )
            raise site.error(f"fails on {label}: {exc}", hint) from exc


# --- evaluating --------------------------------------------------------------------------


def _builtin(name: str, when: str, status: str) -> Rule:
    return replace(compile_rule(f"builtin:{name}", when, status, None), builtin=True)


#: The built-in rules set a status only: which remedy a fault gets is the planner's ladder's
#: alone (navarch.planner.ladder), from the catalogue's recommendation in the report.
_DEFAULT_RULE_DATA: tuple[tuple[str, str, str], ...] = (
    ("agent-unhealthy", "status == 'unhealthy'", "unhealthy"),
    ("fatal-xid", "xids.exists(x, x.severity == 'fatal')", "unhealthy"),
    ("agent-degraded", "status == 'degraded'", "degraded"),
    ("agent-healthy", "status == 'healthy'", "healthy"),
)


def default_rule_data() -> tuple[dict[str, str], ...]:
    """The built-in rules as fleet.yaml would write them (for docs and tests)."""
    return tuple({"name": n, "when": w, "status": s} for n, w, s in _DEFAULT_RULE_DATA)


@cache
def default_rules() -> tuple[Rule, ...]:
    """The built-in rules, compiled once (names prefixed "builtin:"): the agent's own
    status, and a latched fatal XID (navarch/report/xid.py catalogue) as unhealthy. They keep the
    report's recommended remedy. Shown in docs/health-policy.md."""
    return tuple(_builtin(*row) for row in _DEFAULT_RULE_DATA)


def evaluate(rule_sets: Sequence[Sequence[Rule]], report: Mapping[str, Any]) -> PolicyResult:
    """Judge one verified report by the rule sets (pool's, then fleet-wide), falling back
    to default_rules(). Pure: no I/O, no clock.

    report: the report document (schemas/health-report.schema.json), already verified.
    Returns PolicyResult (see the module docstring for the matching rules). Never raises for
    a rule's evaluation error: it is carried in PolicyResult.error.
    """
    import cel

    plain = report_context(report)
    if sum(len(plain[k]) for k in ("checks", "gpus", "xids")) > EAGER_CONTEXT_ITEMS:
        # The resolver converts a list again at every reference: a rule naming xids eight
        # times on 256 XIDs would convert 2,048 of them. Convert a long report once.
        context = cel.Context(variables=plain)
    else:
        # Each rule converts only the variables it reads (a resolver, not the whole
        # report): half the cost of converting everything up front on a typical report.
        # The resolver's None means "not mine", so the one variable that may be null is
        # registered as such beneath it.
        context = cel.Context({"notice": None})
        context.set_variable_resolver(plain.get)
    errors: list[str] = []

    def first_match(rules: Sequence[Rule]) -> Rule | None:
        for rule in rules:
            try:
                if rule.test(context):
                    return rule
            except RuleEvalError as exc:
                errors.append(f"rule {rule.name}: {exc}")
        return None

    matches = [m for m in (first_match(rules) for rules in rule_sets) if m is not None]
    if not matches:
        builtin = first_match(default_rules())
        matches = [builtin] if builtin is not None else []
    error = "; ".join(errors) or None
    reported = _remedy(plain["action"])
    if not matches:
        return PolicyResult(_status(plain["status"]), reported, (), error)
    status = Status.worst(m.status for m in matches)
    chosen = [m.action for m in matches if m.action is not None]
    action = Remedy.strongest(chosen) if chosen else reported
    return PolicyResult(status, action, tuple(matches), error)


def _status(value: Any) -> Status:
    try:
        return Status(value)
    except ValueError:
        return Status.UNKNOWN


def _remedy(value: Any) -> Remedy:
    try:
        return Remedy(value)
    except ValueError:
        return Remedy.NONE
