"""Agent checks from plugins: every installed navarch.checks entry point, run after the
built-in checks (navarch.plugins.AgentCheck is the contract).

Each plugin is called with a read-only context (fleet, pool, node, instance id, boot id,
this run's GPU readings and the built-in checks' results) and returns one result mapping
{"status", "message", "evidence"?, "action"?}. Its check in the report is named after the
entry point (so a plugin can neither collide with another nor pose as a built-in check)
and carries `plugin`: the distribution that declared it.

A plugin never crashes the agent and never makes a node look sick by being broken: one
that fails to import, raises, returns the wrong shape, or does not finish within
config.plugin_check_timeout_s becomes its own check with status degraded (alerted, never
replaced: DESIGN "degraded alerts but does not replace"; the same verdict as an
unreadable kernel log, a source the agent could not read) and the plugin's one-line
PluginError as the message. The report stays valid against the schema either way.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from navarch.agent.checks import Check
from navarch.errors import NavarchError, PluginError
from navarch.plugins import Group, PluginRef, call_within, discover, load
from navarch.report.health import Remedy, Status
from navarch.report.signing import canonical_bytes

__all__ = [
    "plugin_checks",
    "run_plugin_check",
    "check_from_result",
    "context_for",
    "MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_DEPTH",
]

log = logging.getLogger("navarch.agent")

_MAX_MESSAGE = 1024
_MAX_NAME = 64
#: A plugin's evidence, as JSON: at most this many bytes and this deep, so that no plugin
#: can push the report past what the reconciler accepts (navarch.reconcile.reports:
#: MAX_REPORT_BYTES 256 KiB, MAX_NESTING 32), which would make the node unknown.
MAX_EVIDENCE_BYTES = 8 * 1024
MAX_EVIDENCE_DEPTH = 8


def _depth(value: object) -> int:
    if isinstance(value, Mapping):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _evidence(ref: PluginRef, evidence: object) -> dict[str, Any]:
    """The plugin's evidence as a JSON object within the limits; PluginError otherwise."""
    if not isinstance(evidence, Mapping) or not all(isinstance(k, str) for k in evidence):
        raise PluginError(ref, "evidence is not a mapping with string keys")
    if _depth(evidence) > MAX_EVIDENCE_DEPTH:
        raise PluginError(ref, f"evidence is over {MAX_EVIDENCE_DEPTH} levels deep")
    try:
        text = json.dumps(evidence, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PluginError(ref, f"evidence is not JSON: {exc}") from exc
    if len(text.encode()) > MAX_EVIDENCE_BYTES:
        raise PluginError(ref, f"evidence is over {MAX_EVIDENCE_BYTES} bytes as JSON")
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def check_from_result(ref: PluginRef, got: object) -> Check:
    """A plugin's result -> its Check (named after the entry point). Raises PluginError
    when `got` is not a mapping with a known status, a string message, a known action (if
    any) and an evidence JSON object within the limits (if any)."""
    if not isinstance(got, Mapping):
        raise PluginError(ref, f"returned a {type(got).__name__}, not a result mapping")
    statuses = [s.value for s in Status]
    if got.get("status") not in statuses:
        raise PluginError(ref, f"status {got.get('status')!r} is not one of {statuses}")
    if not isinstance(got.get("message"), str):
        raise PluginError(ref, "message is missing or not a string")
    actions = [a.value for a in Remedy]
    action = got.get("action", Remedy.NONE.value)
    if action not in actions:
        raise PluginError(ref, f"action {action!r} is not one of {actions}")
    evidence = _evidence(ref, got.get("evidence", {}))
    check = Check(
        ref.name[:_MAX_NAME],
        Status(got["status"]),
        Remedy(action),
        got["message"][:_MAX_MESSAGE],
        evidence=evidence,
        plugin=ref.dist or ref.value,
    )
    try:  # what has no RFC 8785 form (a lone surrogate, an integer past 2**53) cannot be signed
        canonical_bytes(check.to_json())
    except ValueError as exc:
        raise PluginError(ref, f"result cannot be signed: {exc}") from exc
    return check


def _failed(error: PluginError) -> Check:
    """A broken plugin's check: degraded, its one-line error as the message."""
    log.warning(
        "plugin_check_failed", extra={"fields": {"plugin": error.name, "error": str(error)}}
    )
    return Check(
        error.name[:_MAX_NAME],
        Status.DEGRADED,
        Remedy.NONE,
        str(error)[:_MAX_MESSAGE],
        evidence={"plugin_error": error.reason[:_MAX_MESSAGE]},
        plugin=error.dist or error.value,
    )


def run_plugin_check(name: str, context: Mapping[str, Any], timeout_s: float) -> Check:
    """Load and run the navarch.checks plugin `name` -> its Check; every failure (import,
    exception, wrong shape, timeout) is that check, degraded, never an exception."""
    try:
        found = load(Group.CHECKS, name)
    except PluginError as exc:
        return _failed(exc)
    if found is None:  # uninstalled since discovery: nothing to report
        raise LookupError(name)
    ref, fn = found
    try:
        return check_from_result(ref, call_within(ref, timeout_s, fn, context))
    except PluginError as exc:
        return _failed(exc)
    except NavarchError as exc:  # one the plugin raised itself: still its failure
        return _failed(PluginError(ref, f"raised {type(exc).__name__}: {exc}"))


def plugin_checks(context: Mapping[str, Any], timeout_s: float) -> list[Check]:
    """Every installed navarch.checks plugin, in name order, one Check each.

    context: {"fleet", "pool", "node", "instance_id", "boot_id", "gpus": [report gpus[]
    items], "checks": [report checks[] items of the built-in checks]}; each plugin gets
    its own deep copy. timeout_s: per plugin (AgentConfig.plugin_check_timeout_s).
    """
    out = []
    for name in sorted(discover(Group.CHECKS)):
        try:
            out.append(run_plugin_check(name, copy.deepcopy(dict(context)), timeout_s))
        except LookupError:
            continue
    return out


def context_for(
    config: Any, boot_id: str, gpus: Sequence[Mapping[str, Any]], checks: Sequence[Check]
) -> dict[str, Any]:
    """The context plugin checks get (see plugin_checks)."""
    return {
        "fleet": config.fleet,
        "pool": config.pool,
        "node": config.node,
        "instance_id": config.current_instance_id(),
        "boot_id": boot_id,
        "gpus": [dict(g) for g in gpus],
        "checks": [c.to_json() for c in checks],
    }
