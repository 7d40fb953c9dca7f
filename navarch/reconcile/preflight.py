"""Preflight before the first launch: ask each provider what the plan's launches need.

`plan` and `apply` call preflight(fleet, plan) when the plan provisions: every pool with a
provision action hands its placements (navarch.providers.preflight.LaunchNeeds) to its
providers that declare Capability.PREFLIGHT, and the store is checked writable where that
can be read (a file:// store). The result is one Preflight value: `plan` prints it and
exits non-zero on a gap; `apply` raises PreflightFailed before any action, so every gap is
listed at once instead of one per failed apply.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from navarch.capabilities import Capability
from navarch.errors import NavarchError
from navarch.fleet.spec import FleetSpec
from navarch.planner.model import ActionKind, Plan
from navarch.providers.preflight import (
    Check,
    Finding,
    LaunchNeeds,
    Preflight,
    Preflighter,
    Verdict,
)

if TYPE_CHECKING:
    from navarch.reconcile.run import Fleet

__all__ = ["PreflightFailed", "launch_needs", "preflight", "store_findings", "warn"]

log = logging.getLogger("navarch.preflight")


class PreflightFailed(NavarchError):
    """A launch the plan holds would fail for a missing prerequisite: raised by apply
    before any action. Attribute: preflight (every finding; str() lists the gaps)."""

    def __init__(self, result: Preflight) -> None:
        self.preflight = result
        super().__init__(result.text().rstrip("\n"))


def launch_needs(spec: FleetSpec, plan: Plan) -> dict[str, list[LaunchNeeds]]:
    """Provider name -> the needs of each placement of every pool the plan provisions in
    (pure). Key paths name the placement ("pools.P" or "pools.P.placements[i]")."""
    pools = sorted({a.pool for a in plan.actions if a.kind is ActionKind.PROVISION})
    out: dict[str, list[LaunchNeeds]] = {}
    for name in pools:
        try:
            pool = spec.pool(name)
        except KeyError:
            continue  # an orphan's pool launches nothing
        many = len(pool.placements) > 1
        for i, pl in enumerate(pool.placements):
            out.setdefault(pl.provider, []).append(
                LaunchNeeds(
                    pool=name,
                    zones=pl.zones,
                    instance_types=pl.instance_types,
                    spot=pl.capacity != "on-demand",
                    max_nodes=pool.max_nodes,
                    gpus_per_node=pool.gpus_per_node,
                    options=pl.options,
                    key_prefix=f"pools.{name}.placements[{i}]" if many else f"pools.{name}",
                )
            )
    return out


def store_findings(store: object) -> list[Finding]:
    """The store writable, where that can be read without writing: a file:// store's
    directory (or its nearest existing parent) must be writable by this process. A cloud
    store's reachability is proven by the state read every plan makes first."""
    root = getattr(store, "root", None)
    if not isinstance(root, Path):
        return []
    here = root
    while not here.exists() and here != here.parent:
        here = here.parent
    if os.access(here, os.W_OK | os.X_OK):
        return []
    return [
        Finding(
            Check.STORE,
            Verdict.GAP,
            "store",
            f"store {root}",
            f"{here} is not writable by this user",
            "fix its permissions or point `store:` elsewhere",
            "store",
        )
    ]


def preflight(fleet: Fleet, plan: Plan) -> Preflight:
    """Every finding for the plan's launches (module docstring); an empty Preflight when
    the plan provisions nothing. Reads only; raises nothing a provider's read raises."""
    needs = launch_needs(fleet.spec, plan)
    if not needs:
        return Preflight()
    findings: list[Finding] = list(store_findings(fleet.store))
    for name, pools in sorted(needs.items()):
        provider = fleet.providers.get(name)
        caps = getattr(provider, "capabilities", Capability.NONE)
        if not isinstance(caps, Capability) or Capability.PREFLIGHT not in caps:
            log.debug("provider %s checks no launch prerequisites before launching", name)
            continue
        if isinstance(provider, Preflighter):
            findings.extend(provider.preflight(pools))
    return Preflight.of(findings)


def warn(result: Preflight, logger: logging.Logger = log) -> None:
    """Log each finding that is not a gap (skipped checks, warnings) as one warning line."""
    for f in result.findings:
        if f.verdict is not Verdict.GAP:
            need = f" (needs {f.permission})" if f.permission else ""
            logger.warning("preflight: %s: %s%s -> %s", f.subject, f.detail, need, f.fix)
