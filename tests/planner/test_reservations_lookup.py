"""reservations_of: a provider whose reservation lookup fails or is denied leaves its
pools' reservations unknown with one warning naming the permission; the run goes on."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import builders
import pytest

from navarch.errors import AuthError, TransientError
from navarch.inventory import Reservation, reservations_of

BLOCK = "cr-0123456789abcdef0"


class _Refusing:
    """A provider whose DescribeCapacityReservations answers with `error`."""

    reservations_permission = "ec2:DescribeCapacityReservations"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]:
        raise self.error


def _spec():  # noqa: ANN202 - a FleetSpec
    pool = builders.pool_doc(
        target=2, zones=("us-east-1a",), instance_types=("p5.48xlarge",), provider="ec2"
    )
    pool["aws"] = {"ami": "ami-12c6146b", "capacity_reservation": BLOCK, "market": "capacity-block"}
    doc = builders.fleet_doc("prod", {"a": pool})
    doc["providers"] = {"ec2": {"type": "aws", "region": "us-east-1"}}
    return builders.fleet_from_dict(doc)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            AuthError("UnauthorizedOperation", code="UnauthorizedOperation"),
            "ec2:DescribeCapacityReservations denied (ec2): reservations "
            f"{BLOCK} unknown; grant it for reservation-aware launches and Capacity Block windows",
        ),
        (
            TransientError("EC2 answered with a body that is not EC2's XML"),
            "ec2:DescribeCapacityReservations failed (ec2): EC2 answered with a body",
        ),
    ],
)
def test_a_failed_reservation_lookup_is_unknown_with_a_warning_naming_the_permission(
    error: Exception, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="navarch"):
        found, unknown = reservations_of(_spec(), {"ec2": _Refusing(error)})
    assert found == {} and unknown == frozenset({BLOCK})
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(said), warning
