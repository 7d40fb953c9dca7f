"""The planner's named ideas: the circuit breaker as one value, the repair ranks in their
documented order, the providers' capabilities as data, and the diagnostics' why as an
enum through a saved plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_scenarios import SCENARIOS, build_inputs, run

from navarch.capabilities import Capability
from navarch.planner.breaker import Breaker, breaker_state
from navarch.planner.model import ActionKind, DiagWhy, HaltRule
from navarch.planner.payloads import DiagnosePayload
from navarch.planner.repair import RepairRank
from navarch.providers.aws import AwsProvider
from navarch.providers.azure import AzureProvider
from navarch.providers.base import capabilities_of
from navarch.providers.gcp import GcpProvider
from navarch.providers.lambda_cloud import LambdaProvider
from navarch.providers.local import LocalProvider
from navarch.reconcile.render import plan_from_json, plan_to_json


def _scenario(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    return doc


def test_an_open_breaker_is_one_value_whose_counts_and_reason_its_halt_says(
    tmp_path: Path,
) -> None:
    inputs = build_inputs(_scenario("circuit_breaker_pool"), tmp_path)
    observed, plan = run(inputs)
    train = tuple(v for v in observed.views if v.pool == "train")
    infer = tuple(v for v in observed.views if v.pool == "infer")
    pct = inputs.spec.safety.circuit_breaker_pct

    open_ = breaker_state(train, pct)
    assert (open_.state, open_.sick, open_.total, open_.open) == (Breaker.OPEN, 3, 5, True)
    assert breaker_state(infer, pct).state is Breaker.CLOSED
    fleet = breaker_state(observed.views, inputs.spec.safety.fleet_circuit_breaker_pct)
    assert fleet.state is Breaker.CLOSED and (fleet.sick, fleet.total) == (3, 9)

    halt = next(h for h in plan.halts if h.rule is HaltRule.CIRCUIT_BREAKER and h.pool == "train")
    assert halt.message.startswith(open_.summary() + ": no new cordon")
    assert open_.summary() == "3 of 5 nodes are unhealthy, stale or offline (>= 50%)"
    assert not any(h.pool == "infer" for h in plan.halts)


def test_repair_ranks_take_preemption_first_and_only_faults_and_requests_count_as_repairs() -> None:
    assert (
        sorted(RepairRank)
        == list(RepairRank)
        == [
            RepairRank.PREEMPTION,
            RepairRank.UNHEALTHY,
            RepairRank.OFFLINE,
            RepairRank.REQUESTED,
            RepairRank.MAINTENANCE,
        ]
    )
    assert {r for r in RepairRank if r.counts_as_repair} == {
        RepairRank.UNHEALTHY,
        RepairRank.OFFLINE,
        RepairRank.REQUESTED,
    }


@pytest.mark.parametrize(
    ("declared", "kind"),
    [
        (Capability.UPDATE_TAGS | Capability.REBOOT, ActionKind.UPDATE_TAGS),
        (Capability.REBOOT | Capability.INSTANCE_STATUS, ActionKind.PROVISION),
        (Capability.NONE, ActionKind.PROVISION),
    ],
)
def test_a_relabelled_node_is_retagged_in_place_only_where_its_provider_declares_it(
    tmp_path: Path, declared: Capability, kind: ActionKind
) -> None:
    # The fleet's provider is of type local in both cases: what decides is what the
    # provider declared, never its type.
    inputs = build_inputs(_scenario("drift_labels_updated_in_place"), tmp_path)
    name = next(iter(inputs.spec.providers))
    options = replace(inputs.options, capabilities={name: declared})
    _, plan = run(replace(inputs, options=options))
    assert [a.kind for a in plan.actions] == [kind]
    if kind is ActionKind.PROVISION:
        assert plan.actions[0].replaces == "demo-train-0001"
        assert "local cannot update tags in place" in plan.actions[0].reason


def test_every_built_in_provider_declares_what_it_can_do() -> None:
    declared = {
        cls.__name__: cls.capabilities
        for cls in (LocalProvider, AwsProvider, GcpProvider, AzureProvider, LambdaProvider)
    }
    assert all(isinstance(c, Capability) for c in declared.values())
    # Lambda Cloud fixes an instance's tags at launch; the others change them in place.
    tags = {n for n, c in declared.items() if Capability.UPDATE_TAGS in c}
    assert tags == {"LocalProvider", "AwsProvider", "GcpProvider", "AzureProvider"}
    assert all(Capability.REBOOT in c for c in declared.values())
    assert {n for n, c in declared.items() if Capability.RESET_GPU in c} == {"LocalProvider"}


def test_a_provider_that_declares_nothing_is_asked_for_nothing_beyond_the_base_calls() -> None:
    class Undeclared:  # an older plugin's provider
        name = "old"

    class Declared:
        name = "new"
        capabilities = Capability.UPDATE_TAGS

    got = capabilities_of({"old": Undeclared(), "new": Declared()})
    assert got == {"new": Capability.UPDATE_TAGS, "old": Capability.NONE}


def test_a_saved_plan_keeps_why_a_node_is_diagnosed_as_an_enum(tmp_path: Path) -> None:
    inputs = build_inputs(_scenario("diag_scheduled_drained_node_is_diagnosed"), tmp_path)
    _, plan = run(inputs)
    diagnose = [a for a in plan.actions if a.kind is ActionKind.DIAGNOSE]
    assert diagnose and all(a.carries(DiagnosePayload).why is DiagWhy.SCHEDULED for a in diagnose)
    doc = plan_to_json(plan)
    assert {a["why"] for a in doc["actions"] if a["action"] == "diagnose"} == {"scheduled"}
    back = plan_from_json(doc)
    assert back.actions == plan.actions
