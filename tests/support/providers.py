"""Provider test helpers: provision requests built the way the executor builds them, and
the `Cloud` record the provider contract (tests/contracts) drives each provider through."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from navarch.errors import NavarchError
from navarch.inventory import Instance, launch_id, ownership_tags
from navarch.providers.base import Provider, ProvisionRequest
from navarch.providers.preflight import LaunchNeeds

FLEET = "prod"


def provision_request(
    node: str,
    zone: str,
    instance_type: str,
    *,
    fleet: str = FLEET,
    pool: str = "train",
    attempt: int = 0,
    labels: Mapping[str, str] | None = None,
    **fields: Any,
) -> ProvisionRequest:
    """A ProvisionRequest for `node` in zone: the launch id of (fleet, node, attempt), the
    ownership tags plus labels (default {"team": "ml"}), a one-line cloud-config, no options.

    fields: any other ProvisionRequest field (options, spot, user_data, tags, ...), as given.
    """
    lid = launch_id(fleet, node, attempt)
    tags = {**ownership_tags(fleet, pool, node, lid), **(labels or {"team": "ml"})}
    given: dict[str, Any] = {"spot": False, "user_data": "#cloud-config\n{}\n", "tags": tags}
    given.update(fields)
    return ProvisionRequest(
        fleet=fleet,
        pool=pool,
        node=node,
        zone=zone,
        instance_type=instance_type,
        launch_id=lid,
        attempt=attempt,
        **given,
    )


def request_maker(
    zone: str, instance_type: str, options: Mapping[str, object]
) -> Callable[..., ProvisionRequest]:
    """A provision_request with these defaults: make(node="prod-train-0001", zone=...,
    instance_type=..., **fields) -> ProvisionRequest, options given unless fields say."""

    def make(
        node: str = "prod-train-0001",
        zone: str = zone,
        instance_type: str = instance_type,
        **fields: Any,
    ) -> ProvisionRequest:
        return provision_request(node, zone, instance_type, **{"options": options, **fields})

    return make


class ErrorCase(NamedTuple):
    """An upstream error, the navarch error type it must become, its scope (None: unchecked)."""

    exc: BaseException
    expected: type[NavarchError]
    scope: str | None = None


@dataclass(frozen=True)
class Cloud:
    """One provider on its local fake, as the provider contract drives it.

    provider: the provider under test, for fleet tests.support.providers.FLEET.
    reopen: a new provider object on the same cloud (what a later run builds).
    zones: two places with capacity; full_zone: a place the fake answers every launch in
    with its capacity error (the cloud's own code, injected in the fake).
    instance_type, options: a launchable type and the pool options it needs.
    live: how many instances are alive in the cloud (anyone's).
    add_instance(zone, tags) -> instance id: create an instance in the cloud directly, not
    through navarch (someone else's machine, or another fleet's).
    map_error, errors: the provider's one error boundary and its table of relied-on errors.
    impair(instance): the cloud's own status of that instance turns impaired (its status
    check fails, a host error), set on the fake the way the cloud would show it.
    outage(status): from now on the cloud's instance listing answers an HTML page
    (tests.support.fakehttp.OUTAGE_PAGE) with this HTTP status, as a proxy or an outage
    page in front of the API does; None for a provider with no API behind it.
    """

    provider: Provider
    reopen: Callable[[], Provider]
    zones: tuple[str, str]
    full_zone: str
    instance_type: str
    options: Mapping[str, object]
    live: Callable[[], int]
    add_instance: Callable[[str, Mapping[str, str]], str]
    map_error: Callable[[BaseException], NavarchError] | None = None
    errors: Sequence[ErrorCase] = ()
    impair: Callable[[Instance], None] | None = None
    outage: Callable[[int], None] | None = None


def gcp_provider(endpoint: str, fleet: str = FLEET, **extra: object) -> Provider:
    """The gcp provider against a Compute Engine REST fake at `endpoint` (anonymous, a short
    retry deadline), config `extra` added: what every GCP provider test opens."""
    from navarch.providers import open_provider

    config = {
        "type": "gcp",
        "project": "navarch-test",
        "api_endpoint": endpoint,
        "anonymous": True,
        "retry_deadline_s": 2,
        **extra,
    }
    return open_provider("gcp", config, base_dir=Path(__file__).resolve().parents[2], fleet=fleet)


def train_needs(
    zones: tuple[str, ...],
    types: tuple[str, ...],
    *,
    spot: bool = False,
    max_nodes: int = 2,
    **options: object,
) -> LaunchNeeds:
    """What pool "train" (8 GPUs a node, key path pools.train) needs of a provider's
    preflight: these zones and instance types, spot or not, up to max_nodes; options: the
    placement's provider section (gcp:, azure:)."""
    return LaunchNeeds(
        pool="train",
        zones=zones,
        instance_types=types,
        spot=spot,
        max_nodes=max_nodes,
        gpus_per_node=8,
        options=options,
        key_prefix="pools.train",
    )
