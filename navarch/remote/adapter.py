"""The executor's PlaybookRunner over SSH (navarch.reconcile.executor.PlaybookRunner).

navarch.reconcile.run opens one SSHPlaybooks per fleet when a pool has a scheduler; the
executor calls run() for cordon, drain and uncordon, and reconcile calls it for
drain_check of draining nodes. Every outcome is (ok, detail): detail is one line for the
audit log naming each step's host, command, exit code and duration, or the error.
"""

from __future__ import annotations

from pathlib import Path

from navarch.errors import ConfigError
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.remote.diagnostics import (
    DiagOutcome,
    DiagResult,
    diagnostics_playbook,
    run_diagnostics,
)
from navarch.remote.playbook import PlaybookKind, load_playbook
from navarch.remote.runner import PlaybookOutcome, PlaybookTarget, SSHRunner


class SSHPlaybooks:
    """Runs a pool's playbooks over SSH: its override (pools.<pool>.playbooks.<kind>,
    relative to fleet.yaml) or the built-in playbooks/<scheduler>.yaml."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self._runners: dict[str, SSHRunner] = {}
        #: The last PlaybookOutcome per (node, kind), for callers that want the steps.
        self.last: dict[tuple[str, str], PlaybookOutcome] = {}

    def run(
        self, pool: PoolSpec, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]:
        """Run playbook `kind` for one node of `pool`; returns (ok, detail).

        A configuration mistake (bad playbook file, ssh mapping, missing head_node) is
        (False, the ConfigError's text) rather than an exception, so one bad pool does not
        stop a run; SSH and step failures are (False, the step's error). Scheduler none
        without an override has nothing to run: (True, ...). Template values: node, pool,
        fleet, reason, address, drain_timeout_s (pools.<pool>.health.drain_timeout).
        """
        try:
            override = pool.playbooks.get(kind)
            playbook = load_playbook(
                pool.scheduler.value,
                PlaybookKind(kind),
                override_path=self._path(override) if override else None,
            )
            if playbook is None:
                return True, f"no {kind} steps for scheduler {pool.scheduler}"
            runner = self._runner(pool)
            target = PlaybookTarget(
                fleet=self.spec.name, pool=pool.name, node=node, address=address, reason=reason
            )
            (outcome,) = runner.run(
                playbook, [target], extra={"drain_timeout_s": pool.health.drain_timeout_s}
            )
        except ConfigError as exc:
            return False, f"{kind}: {exc}"
        self.last[(node, kind)] = outcome
        return outcome.ok, summarize(outcome)

    def diagnose(
        self,
        pool: PoolSpec,
        node: str,
        address: str | None,
        level: int,
        reason: str,
        *,
        token: str = "",
    ) -> DiagResult:
        """Run the pool's diagnostics playbook (playbooks.diagnostics, else the built-in
        dcgmi diag, or the agent's acceptance tests when the pool's diagnostics.tests names
        some) on one node at `level` (1-3); returns the DiagResult.

        Never raises for SSH or playbook trouble: a bad playbook file or ssh mapping is an
        `error` result naming the ConfigError, like run() turns it into (False, text).
        """
        try:
            override = pool.playbooks.get("diagnostics")
            playbook = diagnostics_playbook(
                pool.scheduler.value, self._path(override) if override else None
            )
            target = PlaybookTarget(
                fleet=self.spec.name, pool=pool.name, node=node, address=address, reason=reason
            )
            return run_diagnostics(
                self._runner(pool),
                playbook,
                target,
                level,
                token=token,
                tests=pool.diagnostics.tests,
            )
        except ConfigError as exc:
            return DiagResult(level, DiagOutcome.ERROR, detail=f"diagnostics: {exc}")

    def _path(self, value: str) -> Path:
        path = Path(value)
        return path if path.is_absolute() else self.spec.base_dir / path

    def _runner(self, pool: PoolSpec) -> SSHRunner:
        if pool.name not in self._runners:
            self._runners[pool.name] = SSHRunner(
                pool.ssh, base_dir=self.spec.base_dir, pool=pool.name
            )
        return self._runners[pool.name]


def summarize(outcome: PlaybookOutcome) -> str:
    """One audit line: `<kind> ok|failed: host$ command -> exit N (0.4s); ...` then the error."""
    steps = "; ".join(
        f"{s.host}$ {s.command.splitlines()[0] if s.command else ''}"
        f"{' ...' if len(s.command.splitlines()) > 1 else ''}"
        f" -> {'exit ' + str(s.exit_code) if s.exit_code is not None else 'no exit code'}"
        f" ({s.duration_s:.1f}s)"
        for s in outcome.steps
    )
    head = f"{outcome.playbook} {'ok' if outcome.ok else 'failed'}"
    line = f"{head}: {steps}" if steps else f"{head}: no steps"
    return line if outcome.ok else f"{line} | {outcome.error}"
