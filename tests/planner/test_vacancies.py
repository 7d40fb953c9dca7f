"""A node terminated to be replaced under `replacement: after-terminate` leaves a vacancy;
its replacement, planned once the node has left the inventory, still replaces it: it asks
for the node's zone first and, with `topology: same_block`, for its block. A lapsed
vacancy is capacity like any other. observe() and plan() run as `navarch apply` does."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import builders

from navarch.planner.context import PlanOptions
from navarch.planner.model import ActionKind, PoolMemory, Vacancy
from navarch.planner.observe import observe
from navarch.planner.payloads import ProvisionPayload
from navarch.planner.plan import plan
from navarch.planner.vacancies import VACANCY_TTL_S, fill, open_vacancies, record

FLEET = "demo"
NOW = builders.BASE_NOW
GONE = "demo-a-0001"


def _spec():  # noqa: ANN202 - a FleetSpec
    pool = builders.pool_doc(
        target=3, max_nodes=3, zones=("z1", "z2"), health={"replacement": "after-terminate"}
    )
    pool["topology"] = "same_block"
    return builders.fleet_from_dict(builders.fleet_doc(FLEET, {"a": pool}))


def _plan(vacancies: tuple[Vacancy, ...]):  # noqa: ANN202 - a Plan
    spec = _spec()
    inventory = [
        builders.instance(
            FLEET,
            "a",
            f"demo-a-000{i}",
            launched_at=NOW - timedelta(hours=1),
            zone=z,
            topology=(z, f"rack-{i}", f"{z}-r{i}-h00"),
        )
        for i, z in ((2, "z1"), (3, "z1"))
    ]
    pm = replace(builders.pool_memory("a", next_index=4), vacancies=vacancies)
    reports = {
        i.node or "": builders.observation(
            i.node or "", "a", builders.summary(sequence=5, generated_at=NOW)
        )
        for i in inventory
    }
    observed = observe(spec, inventory, reports, builders.memory(FLEET, [], [pm]), NOW)
    options = PlanOptions(capabilities=builders.capabilities(spec))
    return plan(spec, observed.views, observed.memory, NOW, options)


def test_a_replacement_after_terminate_lands_in_the_gone_nodes_zone_and_block() -> None:
    vacancy = Vacancy(GONE, "sim", "z2", "z2/rack-1", NOW - timedelta(minutes=5))
    [launch] = [a for a in _plan((vacancy,)).actions if a.kind is ActionKind.PROVISION]
    assert launch.replaces == GONE
    assert launch.carries(ProvisionPayload).block == "z2/rack-1"
    assert launch.carries(ProvisionPayload).places[0].zone == "z2"
    assert f"replaces {GONE}; in block z2/rack-1" in launch.reason


def test_a_lapsed_vacancy_is_plain_capacity() -> None:
    old = Vacancy(GONE, "sim", "z2", "z2/rack-1", NOW - timedelta(seconds=VACANCY_TTL_S + 1))
    [launch] = [a for a in _plan((old,)).actions if a.kind is ActionKind.PROVISION]
    assert launch.replaces is None and launch.carries(ProvisionPayload).block == ""


def test_a_vacancy_is_recorded_once_per_node_and_filled_by_its_replacement() -> None:
    pm = PoolMemory("a")
    v = Vacancy(GONE, "sim", "z2", "z2/rack-1", NOW)
    pm = record(record(pm, v, NOW), v, NOW)
    assert pm.vacancies == (v,)
    assert open_vacancies(pm, NOW, {GONE}) == ()  # still listed: replaced as itself
    assert fill(pm, GONE, NOW).vacancies == ()


def test_vacancies_survive_the_state_file() -> None:
    from navarch.reconcile.codec import memory_from_json, memory_to_json

    v = Vacancy(GONE, "sim", "z2", "z2/rack-1", NOW)
    pm = replace(builders.pool_memory("a"), vacancies=(v,))
    mem = builders.memory(FLEET, [], [pm])
    assert memory_from_json(memory_to_json(mem)).pool("a").vacancies == (v,)
