"""Where an EC2 launch lands inside a zone: a cluster placement group, EFA interfaces, and
the Capacity Reservation (or Capacity Block) it draws on.

A pool's `aws:` section may declare (schemas/providers/aws.schema.json#/$defs/pool):

- placement_group: NAME: launches go into this placement group; navarch creates it with
  strategy `cluster` when it does not exist (CreatePlacementGroup), so a replacement
  joins the same network fabric as the nodes it works with.
- placement_fallback: wait | outside: when the group has no room (EC2 answers
  InsufficientInstanceCapacity for a launch into the group), `wait` (the default) keeps
  the place in capacity backoff and the plan says the group is full; `outside` launches
  the node outside the group instead and logs a warning naming it.
- efa: true: as many EFA interfaces as the instance type allows (DescribeInstanceTypes
  NetworkInfo.EfaInfo.MaximumEfaInterfaces, one per network card): card 0 carries the
  primary interface as `efa` (EFA with ENA, it keeps the instance's IP), every further
  card an `efa-only` interface at device index 0. Needs a subnet for the zone.
- capacity_reservation: an On-Demand Capacity Reservation id (cr-...), a Capacity
  Reservation resource group ARN, or the preference `open` / `none`.
- market: capacity-block: the node launches into the Capacity Block whose reservation id
  is capacity_reservation (MarketType capacity-block; EC2 requires the block's id).

Sources: the EC2 API model (botocore service-2.json: Placement, CreatePlacementGroup,
CapacityReservationSpecification, InstanceMarketOptionsRequest,
InstanceNetworkInterfaceSpecification, DescribeInstanceTypes NetworkInfo), the EC2 user
guide pages "Placement groups", "Elastic Fabric Adapter" (EFA on multi-card types) and
"Capacity Blocks for ML" (capacity-blocks-launch). Pure request builders, plus
`ensure_group` and `efa_info`, which take an EC2 client and run inside aws_errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from navarch.errors import ConfigError
from navarch.inventory import Reservation
from navarch.providers.placement_fallback import (
    PlacementFallback,
    fallback_of,
    launch_with_fallback,
)

__all__ = [
    "AwsPlacement",
    "PlacementFallback",
    "efa_info",
    "efa_interfaces",
    "create_group",
    "ensure_group",
    "group_exists",
    "launch",
    "outside_group",
    "placed_params",
    "describe_reservations",
    "placement_group_request",
    "to_reservation",
]

log = logging.getLogger("navarch.providers.aws")

#: The tag every placement group navarch creates carries (its fleet), like its instances.
GROUP_TAG = "navarch-fleet"
#: EC2 MarketType of a Capacity Block launch (InstanceMarketOptionsRequest.MarketType).
CAPACITY_BLOCK = "capacity-block"
#: CapacityReservationPreference values a pool may name instead of a reservation.
RESERVATION_PREFERENCES = ("open", "none")


@dataclass(frozen=True)
class AwsPlacement:
    """A pool's placement settings from its `aws:` mapping (see the module docstring)."""

    placement_group: str | None = None
    placement_fallback: PlacementFallback = PlacementFallback.WAIT
    efa: bool = False
    capacity_reservation: str | None = None
    capacity_block: bool = False

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], *, pool: str = "") -> AwsPlacement:
        """Raises ConfigError (key path pools.<pool>.aws.capacity_reservation) for
        `market: capacity-block` without a reservation id: EC2 refuses such a launch."""
        block = options.get("market") == CAPACITY_BLOCK
        reservation = options.get("capacity_reservation") or None
        if block and not str(reservation or "").startswith("cr-"):
            raise ConfigError(
                "market: capacity-block needs the Capacity Block's reservation id",
                key_path=f"pools.{pool}.aws.capacity_reservation",
                hint="set capacity_reservation: cr-... (the block's CapacityReservationId)",
            )
        return cls(
            placement_group=options.get("placement_group") or None,
            placement_fallback=fallback_of(
                options, key_path=f"pools.{pool}.aws.placement_fallback"
            ),
            efa=bool(options.get("efa", False)),
            capacity_reservation=None if reservation is None else str(reservation),
            capacity_block=block,
        )

    @property
    def declared(self) -> bool:
        """Whether any of these settings changes the launch."""
        return bool(self.placement_group or self.efa or self.capacity_reservation)


def placement_group_request(name: str, fleet: str) -> dict[str, Any]:
    """CreatePlacementGroup's keyword arguments: a `cluster` group (one zone, one low-
    latency fabric: EC2 user guide, "Placement strategies") tagged with the fleet."""
    return {
        "GroupName": name,
        "Strategy": "cluster",
        "TagSpecifications": [
            {"ResourceType": "placement-group", "Tags": [{"Key": GROUP_TAG, "Value": fleet}]}
        ],
    }


def group_exists(client: Any, name: str) -> bool:
    """Whether the placement group `name` exists: DescribePlacementGroups(GroupNames=[name]);
    EC2 answers InvalidPlacementGroup.Unknown for a missing one. Call inside aws_errors."""
    from botocore.exceptions import ClientError

    try:
        found = client.describe_placement_groups(GroupNames=[name]).get("PlacementGroups", ())
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Unknown":
            raise
        return False
    return bool(found)


def create_group(client: Any, name: str, fleet: str) -> bool:
    """CreatePlacementGroup(placement_group_request) -> True when it was created, False
    when it exists already (InvalidPlacementGroup.Duplicate: another launch of the same
    run, or someone else, made it; it is used as it is). Call inside aws_errors."""
    from botocore.exceptions import ClientError

    try:
        client.create_placement_group(**placement_group_request(name, fleet))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Duplicate":
            raise
        return False
    return True


def ensure_group(client: Any, name: str, fleet: str) -> bool:
    """Create the placement group `name` unless it exists -> True when it was created
    (group_exists, then create_group). Call inside aws_errors: other errors are mapped."""
    return not group_exists(client, name) and create_group(client, name, fleet)


def efa_info(client: Any, instance_type: str) -> tuple[int, int]:
    """(MaximumEfaInterfaces, MaximumNetworkCards) of an instance type, from
    DescribeInstanceTypes NetworkInfo; (0, 1) for a type without EFA support."""
    types = client.describe_instance_types(InstanceTypes=[instance_type]).get("InstanceTypes", [])
    net = types[0].get("NetworkInfo", {}) if types else {}
    efa = net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0
    return int(efa), int(net.get("MaximumNetworkCards", 1) or 1)


def efa_interfaces(
    subnet: str, groups: list[str], max_efa: int, cards: int
) -> list[dict[str, Any]]:
    """RunInstances NetworkInterfaces with min(max_efa, cards) EFA interfaces, one per
    network card: card 0's primary as `efa` (EFA with ENA), the rest `efa-only` at device
    index 0 (EC2 user guide, "Maximize network bandwidth ... EFA": the primary interface
    cannot be efa-only). Every interface in `subnet` with `groups`, deleted with the node."""
    out: list[dict[str, Any]] = []
    for card in range(max(1, min(max_efa, cards))):
        iface: dict[str, Any] = {
            "NetworkCardIndex": card,
            "DeviceIndex": 0,
            "InterfaceType": "efa" if card == 0 else "efa-only",
            "SubnetId": subnet,
            "DeleteOnTermination": True,
        }
        if groups:
            iface["Groups"] = list(groups)
        out.append(iface)
    return out


def placed_params(
    params: Mapping[str, Any], placement: AwsPlacement, efa: tuple[int, int] | None = None
) -> dict[str, Any]:
    """RunInstances keyword arguments with the pool's placement settings added (pure).

    params: run_instances_params' output; efa: efa_info of the type when placement.efa.
    Placement.GroupName for a group; NetworkInterfaces (replacing the top-level SubnetId
    and SecurityGroupIds, which RunInstances refuses beside them) for EFA;
    CapacityReservationSpecification for a reservation (an id or resource group ARN as
    its CapacityReservationTarget, `open`/`none` as its CapacityReservationPreference);
    InstanceMarketOptions MarketType capacity-block for a Capacity Block. Raises
    ConfigError for EFA without a subnet, or EFA on a type that has none.
    """
    out = dict(params)
    if placement.placement_group:
        out["Placement"] = {**out["Placement"], "GroupName": placement.placement_group}
    if placement.efa:
        max_efa, cards = efa or (0, 1)
        subnet = out.pop("SubnetId", None)
        if not subnet or not max_efa:
            why = "has no subnet for its zone" if not subnet else "has no EFA support"
            raise ConfigError(
                f"efa: true but the launch of {out['InstanceType']} {why}",
                key_path="aws.efa",
                hint="set aws.subnets for the zone and use an EFA-capable type, or efa: false",
            )
        groups = out.pop("SecurityGroupIds", [])
        out["NetworkInterfaces"] = efa_interfaces(subnet, groups, max_efa, cards)
    reservation = placement.capacity_reservation
    if reservation in RESERVATION_PREFERENCES:
        out["CapacityReservationSpecification"] = {"CapacityReservationPreference": reservation}
    elif reservation:
        key = (
            "CapacityReservationId"
            if reservation.startswith("cr-")
            else ("CapacityReservationResourceGroupArn")
        )
        out["CapacityReservationSpecification"] = {"CapacityReservationTarget": {key: reservation}}
    if placement.capacity_block:
        out["InstanceMarketOptions"] = {"MarketType": CAPACITY_BLOCK}
    return out


def outside_group(params: Mapping[str, Any]) -> dict[str, Any]:
    """The same launch outside its placement group (placement_fallback: outside): no
    Placement.GroupName, and a ClientToken of its own, since EC2 refuses a token reused
    with other parameters (IdempotentParameterMismatch)."""
    out = dict(params)
    out["Placement"] = {k: v for k, v in out["Placement"].items() if k != "GroupName"}
    out["ClientToken"] = f"{out['ClientToken']}-outside"
    return out


def launch(
    run: Callable[[dict[str, Any]], Any], params: dict[str, Any], placement: AwsPlacement
) -> Any:
    """RunInstances through `run` (which maps errors, aws_errors) -> its response.

    When the launch goes into a placement group and EC2 has no room for it there
    (CapacityError: InsufficientInstanceCapacity for the group), placement_fallback
    decides (navarch.providers.placement_fallback): `wait` raises a CapacityError naming
    the group; `outside` logs a warning and launches again outside the group
    (outside_group). Other errors leave as they are.
    """
    group = placement.placement_group
    where = f"{params.get('InstanceType')} in {params.get('Placement', {}).get('AvailabilityZone')}"
    return launch_with_fallback(
        lambda: run(params),
        lambda: run(outside_group(params)),
        group=f"placement group {group}" if group else "",
        fallback=placement.placement_fallback,
        where=where,
        log=log,
    )


def to_reservation(provider: str, raw: Mapping[str, Any]) -> Reservation:
    """One DescribeCapacityReservations entry (CapacityReservation shape) -> Reservation:
    TotalInstanceCount, AvailableInstanceCount, StartDate, EndDate (aware UTC; EndDate
    only when EndDateType is limited), ReservationType capacity-block, State."""
    from navarch.providers.aws_status import aware_utc as _aware_utc

    end = raw.get("EndDate")
    return Reservation(
        provider=provider,
        reservation_id=str(raw["CapacityReservationId"]),
        instance_type=str(raw.get("InstanceType", "")),
        zone=str(raw.get("AvailabilityZone", "")),
        total=int(raw.get("TotalInstanceCount", 0)),
        available=int(raw.get("AvailableInstanceCount", 0)),
        start=_aware_utc(raw["StartDate"]) if raw.get("StartDate") else None,
        end=_aware_utc(end) if end else None,
        capacity_block=raw.get("ReservationType") == CAPACITY_BLOCK,
        state=str(raw.get("State", "")),
    )


def describe_reservations(
    client_for: Callable[[str], Any], regions: Sequence[str], ids: Sequence[str], provider: str
) -> list[Reservation]:
    """DescribeCapacityReservations(CapacityReservationIds=[id]) per id, region by region
    until one knows it (InvalidCapacityReservationId.NotFound: try the next) ->
    Reservations. client_for(region): the EC2 client. Raises the mapped errors."""
    from botocore.exceptions import ClientError

    from navarch.providers.aws_errors import aws_errors

    out: list[Reservation] = []
    for rid in ids:
        for region in regions:
            with aws_errors(what=f"DescribeCapacityReservations {rid} in {region}"):
                try:
                    page = client_for(region).describe_capacity_reservations(
                        CapacityReservationIds=[rid]
                    )
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") == (
                        "InvalidCapacityReservationId.NotFound"
                    ):
                        continue
                    raise
            out += [to_reservation(provider, r) for r in page.get("CapacityReservations", ())]
            break
    return out
