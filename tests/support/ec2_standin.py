"""EC2 calls moto does not implement, answered inside the moto server at its HTTP boundary.

moto 5.2 implements neither CreatePlacementGroup, DescribePlacementGroups nor
DescribeCapacityReservations (NotImplementedError, HTTP 500), and it ignores
RunInstances' Placement.GroupName, CapacityReservationSpecification and the
InterfaceType of NetworkInterfaces (/work/shared/reference/cloud-placement-events.md
§1.8). The `ec2_standin` fixture adds those operations to moto's EC2 responder for one
test: each request moto parsed with botocore's EC2 model is validated against that
model's input shape (a request botocore's own model would refuse is answered with the
error EC2 gives, InvalidParameterValue), answered in the model's output shape (moto
serialises ActionResult with the model), and recorded with its parsed parameters, so a
test asserts the exact request at the HTTP boundary. RunInstances is recorded the same way
and refused as EC2 would: into an unknown placement group (InvalidPlacementGroup.Unknown)
or, for a group a test marks full, InsufficientInstanceCapacity.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from botocore.session import get_session
from botocore.validate import ParamValidator


@dataclass
class Ec2Standin:
    """Placement groups and capacity reservations the stand-in knows, and every request it
    saw as (operation, parsed parameters), in order."""

    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    full: set[str] = field(default_factory=set)  # groups with no room left
    reservations: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def requests(self, operation: str) -> list[dict[str, Any]]:
        return [p for op, p in self.calls if op == operation]

    def reservation(
        self,
        reservation_id: str,
        *,
        instance_type: str,
        zone: str,
        total: int,
        available: int,
        start: datetime | None = None,
        end: datetime | None = None,
        kind: str = "default",
        state: str = "active",
    ) -> None:
        """Add a Capacity Reservation in DescribeCapacityReservations' shape."""
        r: dict[str, Any] = {
            "CapacityReservationId": reservation_id,
            "InstanceType": instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": zone,
            "TotalInstanceCount": total,
            "AvailableInstanceCount": available,
            "State": state,
            "InstanceMatchCriteria": "targeted",
            "ReservationType": kind,
            "EndDateType": "limited" if end else "unlimited",
        }
        if start:
            r["StartDate"] = start
        if end:
            r["EndDate"] = end
        self.reservations.append(r)


_MODEL = get_session().get_service_model("ec2")


def _error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


def _checked(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    shape = _MODEL.operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise _error("InvalidParameterValue", report.generate_report())
    return params


def _install(standin: Ec2Standin) -> dict[str, Any]:
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response

    original_run = EC2Response.run_instances

    def describe_placement_groups(self: Any) -> Any:
        params = _checked("DescribePlacementGroups", dict(self.params))
        standin.calls.append(("DescribePlacementGroups", params))
        names = params.get("GroupNames") or [n for r, n in standin.groups if r == self.region]
        missing = [n for n in names if (self.region, n) not in standin.groups]
        if missing:
            raise _error(
                "InvalidPlacementGroup.Unknown", f"The Placement Group '{missing[0]}' is unknown."
            )
        return ActionResult({"PlacementGroups": [standin.groups[(self.region, n)] for n in names]})

    def create_placement_group(self: Any) -> Any:
        params = _checked("CreatePlacementGroup", dict(self.params))
        standin.calls.append(("CreatePlacementGroup", params))
        name = params["GroupName"]
        if (self.region, name) in standin.groups:
            raise _error(
                "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
            )
        tags = [t for s in params.get("TagSpecifications", ()) for t in s.get("Tags", ())]
        group = {
            "GroupName": name,
            "GroupId": f"pg-{len(standin.groups) + 1:017x}",
            "State": "available",
            "Strategy": params.get("Strategy", "cluster"),
            "Tags": tags,
        }
        standin.groups[(self.region, name)] = group
        return ActionResult({"PlacementGroup": group})

    def describe_capacity_reservations(self: Any) -> Any:
        params = _checked("DescribeCapacityReservations", dict(self.params))
        standin.calls.append(("DescribeCapacityReservations", params))
        ids = params.get("CapacityReservationIds")
        found = [r for r in standin.reservations if not ids or r["CapacityReservationId"] in ids]
        missing = set(ids or ()) - {r["CapacityReservationId"] for r in found}
        if missing:
            raise _error(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{sorted(missing)[0]}' does not exist",
            )
        return ActionResult({"CapacityReservations": found})

    def run_instances(self: Any) -> Any:
        params = _checked("RunInstances", dict(self.params))
        standin.calls.append(("RunInstances", params))
        group = params.get("Placement", {}).get("GroupName")
        if group and (self.region, group) not in standin.groups:
            raise _error(
                "InvalidPlacementGroup.Unknown", f"The Placement Group '{group}' is unknown."
            )
        if group in standin.full:
            raise _error(
                "InsufficientInstanceCapacity",
                f"We currently do not have sufficient capacity in placement group {group}.",
            )
        return original_run(self)

    added = {
        "describe_placement_groups": describe_placement_groups,
        "create_placement_group": create_placement_group,
        "describe_capacity_reservations": describe_capacity_reservations,
        "run_instances": run_instances,
    }
    saved = {name: EC2Response.__dict__.get(name) for name in added}
    for name, fn in added.items():
        setattr(EC2Response, name, fn)
    return saved


@pytest.fixture
def ec2_standin(moto: Any) -> Iterator[Ec2Standin]:
    """The stand-in operations on the session's moto server, for one test."""
    from moto.ec2.responses import EC2Response

    standin = Ec2Standin()
    saved = _install(standin)
    try:
        yield standin
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(EC2Response, name)
            else:
                setattr(EC2Response, name, fn)
