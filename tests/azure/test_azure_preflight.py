"""Azure preflight through the real azure-mgmt-compute client against the fake ARM
(tests/support/fake_arm.py: Resource SKUs of a location, its vCPU usages), and `navarch
plan` on it: a VM size a location or zone does not offer is a gap naming the fleet.yaml
key; a denied read is a note naming the action, never a stop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from navarch.providers import open_provider
from navarch.providers.azure import AzureProvider
from navarch.providers.preflight import Check, LaunchNeeds, Preflight, Verdict
from tests.support.cli import in_process
from tests.support.fake_arm import SUB, TOKEN, FakeARM
from tests.support.providers import train_needs

SECRET = "0123456789abcdef0123456789abcdef"
H100 = "Standard_ND96isr_H100_v5"


def _provider(endpoint: str, subscription: str = SUB) -> AzureProvider:
    config = {
        "type": "azure",
        "subscription_id": subscription,
        "resource_group": "rg",
        "base_url": endpoint,
        "retry_total": 0,
    }
    p = open_provider("az", config, base_dir=Path("."), fleet="f")
    assert isinstance(p, AzureProvider)
    return p


def _need(
    zones: tuple[str, ...] = ("eastus-1", "eastus-2"),
    types: tuple[str, ...] = (H100,),
    **kw: Any,
) -> LaunchNeeds:
    return train_needs(zones, types, **kw)


def test_a_size_restricted_in_a_zone_is_a_gap_naming_zones(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.sku_restrictions[("eastus", H100)] = [
        {
            "type": "Zone",
            "values": ["eastus"],
            "restrictionInfo": {"locations": ["eastus"], "zones": ["2"]},
            "reasonCode": "NotAvailableForSubscription",
        }
    ]
    result = Preflight.of(_provider(arm_endpoint).preflight([_need()]))
    (gap,) = result.gaps
    assert (gap.check, gap.where, gap.key_path) == (Check.OFFERING, "az", "pools.train.zones")
    assert gap.line() == (
        f"pool train: {H100} in eastus-2: VM size not offered in zone 2 of eastus (zones 1, 3 "
        f"offer it) -> drop eastus-2 from zones or {H100} from instance_types (or move them "
        "to a placement of their own) (pools.train.zones)"
    )
    listed = [c for c in fake_arm.calls if c.path.endswith("/Microsoft.Compute/skus")]
    assert len(listed) == 1  # one read per location


def test_a_size_not_offered_or_not_for_this_subscription_is_a_gap_naming_instance_types(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.unoffered.add(("westus", H100))
    fake_arm.sku_restrictions[("eastus", H100)] = [
        {"type": "Location", "values": ["eastus"], "reasonCode": "NotAvailableForSubscription"}
    ]
    gaps = Preflight.of(_provider(arm_endpoint).preflight([_need(("eastus", "westus"))])).gaps
    said = {g.subject: g.detail for g in gaps}
    assert said == {
        f"pool train: {H100} in eastus": "not available to this subscription here "
        "(NotAvailableForSubscription)",
        f"pool train: {H100} in westus": "not offered in this location",
    }
    assert {g.key_path for g in gaps} == {"pools.train.instance_types"}


def test_the_families_and_the_spot_vcpu_quotas_are_checked(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.usages["eastus"] = {
        "standardNDSH100v5Family": (48, 0),  # below one node of 96 vCPUs
        "cores": (1000, 0),
        "lowPriorityCores": (100, 0),  # one Spot node, not two
    }
    provider = _provider(arm_endpoint)
    (gap,) = provider.preflight([_need()])
    assert (gap.check, gap.verdict) == (Check.QUOTA, Verdict.GAP)
    assert gap.subject == f"pool train: vCPU quota standardNDSH100v5Family in eastus ({H100})"
    assert gap.detail == "48 vCPUs allowed, one node needs 96"
    (note,) = provider.preflight([_need(spot=True)])
    assert (note.verdict, note.detail) == (
        Verdict.WARNING,
        "100 vCPUs allowed, the pool's max needs 192",
    )


def test_a_denied_sku_read_is_skipped_naming_the_action_and_does_not_block(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.fail("GET", r"/Microsoft\.Compute/skus$", 403, "AuthorizationFailed", times=-1)
    result = Preflight.of(_provider(arm_endpoint).preflight([_need()]))
    assert not result.blocks
    (skipped,) = result.findings
    assert (skipped.verdict, skipped.permission) == (
        Verdict.SKIPPED,
        "Microsoft.Compute/skus/read",
    )
    assert "(needs Microsoft.Compute/skus/read)" in result.text()


def test_a_subscription_arm_does_not_know_is_one_gap_naming_subscription_id(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.fail("GET", r"/Microsoft\.Compute/skus$", 404, "SubscriptionNotFound", times=-1)
    (gap,) = _provider(arm_endpoint).preflight([_need(), _need(("westus",))])
    assert (gap.check, gap.verdict) == (Check.ACCOUNT, Verdict.GAP)
    assert gap.key_path == "providers.az.subscription_id"


def test_plan_on_azure_lists_the_gap_and_apply_launches_nothing(
    fake_arm: FakeARM, arm_endpoint: str, tmp_path: Path
) -> None:
    fake_arm.unoffered.add(("westus", H100))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""\
fleet: azdemo
store: file://store
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  az: {{type: azure, subscription_id: "{SUB}", resource_group: rg, base_url: "{arm_endpoint}", retry_total: 0}}
pools:
  train:
    provider: az
    gpus_per_node: 8
    instance_types: [{H100}]
    zones: [eastus-1, westus]
    nodes: {{min: 0, target: 1, max: 2}}
    health: {{boot_timeout: 30m}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env.update(NAVARCH_FLEET_SECRET=SECRET, NAVARCH_AZURE_TOKEN=TOKEN)
    code, out, err = in_process(("plan", str(fleet)), cwd=tmp_path, env=env)
    assert code == 1, out + err
    assert "Preflight: 1 gap before the first launch" in out
    assert f"{H100} in westus: not offered in this location" in out
    assert "(pools.train.instance_types)" in out
    code, out, err = in_process(("apply", str(fleet), "--auto-approve"), cwd=tmp_path, env=env)
    assert code == 1 and "not offered in this location" in out + err
    assert fake_arm.vm_puts == []
