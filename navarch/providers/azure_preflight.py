"""Azure preflight: what a pool's launches need, checked by reads before the first launch
(the Azure side of navarch.providers.preflight; aws_preflight is EC2's).

Per location of a pool placement's zones ("eastus-1": eastus, zone 1; "eastus": regional):
- the subscription is reachable (its first read: a SubscriptionNotFound answer is a gap
  naming providers.NAME.subscription_id);
- each VM size is offered in the location, to this subscription, in each named zone
  (Resource SKUs list, $filter location: a size absent, a Location restriction, a zone not
  in locationInfo.zones or under a Zone restriction is a gap);
- the vCPU quota holds one node and the pool's max (Usage list of the location: the size's
  family quota and the regional total "cores", or "lowPriorityCores" for Spot): optional.
A read the role denies (401, 403, AuthorizationFailed) is a SKIPPED finding naming the
action (docs/policies/azure-reconciler-role.json grants them all); any other failed read
is a WARNING. Sources: Compute REST API reference "Resource Skus - List" and "Usage -
List"; "Resolve errors for SKU not available"; "Check vCPU quotas" (the family, regional
and Spot vCPU quotas).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

from navarch.providers.preflight import (
    Check,
    Finding,
    LaunchNeeds,
    NotFoundAnswer,
    ReadFailure,
    Reads,
    Verdict,
    judge_quota,
)

__all__ = ["SKUS_READ", "USAGES_READ", "classify", "preflight_findings", "split_zone"]

SKUS_READ = "Microsoft.Compute/skus/read"
USAGES_READ = "Microsoft.Compute/locations/usages/read"
_ASK = "request more vCPUs for it (Azure portal, Quotas, Compute) or name another size"
_DENIED_CODES = frozenset({"AuthorizationFailed", "LinkedAuthorizationFailed"})
_NOT_FOUND_CODES = frozenset({"SubscriptionNotFound", "InvalidSubscriptionId"})


def split_zone(zone: str) -> tuple[str, str | None]:
    """'eastus-1' -> ('eastus', '1'); 'eastus' -> ('eastus', None)."""
    location, sep, number = zone.rpartition("-")
    if sep and number.isdigit():
        return location, number
    return zone, None


def classify(exc: Exception) -> ReadFailure | None:
    """How an ARM read failed: SubscriptionNotFound / InvalidSubscriptionId NOT_FOUND;
    401, 403, AuthorizationFailed and credential errors DENIED; any other azure-core
    error FAILED."""
    if isinstance(exc, ClientAuthenticationError):
        return ReadFailure.DENIED
    if isinstance(exc, HttpResponseError):
        code = str(getattr(exc.error, "code", "") or "")
        if code in _NOT_FOUND_CODES:
            return ReadFailure.NOT_FOUND
        if code in _DENIED_CODES or exc.status_code in (401, 403):
            return ReadFailure.DENIED
        return ReadFailure.FAILED
    if isinstance(exc, AzureError | ValueError):
        return ReadFailure.FAILED
    return None


@dataclass
class _Subscription:
    """The reads of one preflight, cached across its pools."""

    reads: Reads
    compute: Callable[[], Any]
    skus: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    usages: dict[str, dict[str, tuple[float, float]] | None] = field(default_factory=dict)
    missing: bool = False


def preflight_findings(
    provider: str, compute: Callable[[], Any], needs: Sequence[LaunchNeeds]
) -> list[Finding]:
    """Every finding for these pools (see the module docstring). compute() -> the
    provider's ComputeManagementClient. Never raises a cloud error: a failed read is a
    finding."""

    state = _Subscription(Reads(provider, classify), compute)
    for need in needs:
        key = need.key_prefix or f"pools.{need.pool}"
        by_location: dict[str, list[str | None]] = {}
        for zone in need.zones:
            location, number = split_zone(zone)
            by_location.setdefault(location.lower(), []).append(number)
        for location, numbers in sorted(by_location.items()):
            skus = _skus(state, provider, location)
            if state.missing:
                return state.reads.findings
            if skus is None:
                continue
            for size in need.instance_types:
                sku = skus.get(size.lower())
                if _offered(state.reads, need.pool, key, location, numbers, size, sku):
                    _quota(state, need, location, size, sku)
    return state.reads.findings


def _skus(state: _Subscription, provider: str, location: str) -> dict[str, Any] | None:
    """Resource SKUs of virtual machines in location, once per location, by lower-case
    name (None: not read)."""
    if location not in state.skus:
        state.skus[location] = None
        subject = f"VM sizes in {location}"
        try:
            with state.reads.read(SKUS_READ, subject, Check.OFFERING):
                listed = state.compute().resource_skus.list(filter=f"location eq '{location}'")
                state.skus[location] = {
                    str(s.name).lower(): s
                    for s in listed
                    if _text(s.resource_type).lower() == "virtualmachines"
                }
        except NotFoundAnswer as exc:
            state.missing = True
            state.reads.add(
                Check.ACCOUNT,
                Verdict.GAP,
                "subscription",
                f"not reachable ({exc})",
                "name a subscription id these credentials can use (az account list)",
                key_path=f"providers.{provider}.subscription_id",
            )
    return state.skus[location]


def _text(value: Any) -> str:
    """An SDK enum member (a str enum whose str() is its class and name) or str as text."""
    return str(getattr(value, "value", value) or "")


def _values(restriction: Any) -> list[Any]:
    """A restriction's values: azure-mgmt-compute 39's models are mappings, whose
    attribute `values` is the mapping method, so the field is read by key there."""
    if isinstance(restriction, Mapping):
        return list(restriction.get("values") or ())
    return list(restriction.values or ())


def _restricted(sku: Any, kind: str, location: str) -> list[Any]:
    """The SKU's restrictions of kind ("location", "zone") that apply in location."""
    return [
        r
        for r in sku.restrictions or ()
        if _text(r.type).lower() == kind and location in [str(v).lower() for v in _values(r)]
    ]


def _offered(
    reads: Reads,
    pool: str,
    key: str,
    location: str,
    numbers: list[str | None],
    size: str,
    sku: Any,
) -> bool:
    """Whether size can launch in location (and each numbered zone); a GAP where not."""
    drop = "(or move them to a placement of their own)"
    where = f"pool {pool}: {size} in {location}"
    if sku is None or _restricted(sku, "location", location):
        reason = "not offered in this location"
        if sku is not None:
            codes = {_text(r.reason_code) for r in _restricted(sku, "location", location)}
            reason = f"not available to this subscription here ({', '.join(sorted(codes))})"
        reads.add(
            Check.OFFERING,
            Verdict.GAP,
            where,
            reason,
            f"drop {location} from zones or {size} from instance_types {drop}",
            key_path=f"{key}.instance_types",
        )
        return False
    offered = {
        str(z)
        for info in sku.location_info or ()
        if str(info.location or "").lower() == location
        for z in info.zones or ()
    }
    for r in _restricted(sku, "zone", location):
        offered -= {str(z) for z in (r.restriction_info.zones or ())}
    for number in numbers:
        if number is not None and number not in offered:
            zone = f"{location}-{number}"
            reads.add(
                Check.OFFERING,
                Verdict.GAP,
                f"pool {pool}: {size} in {zone}",
                f"VM size not offered in zone {number} of {location}"
                + (f" (zones {', '.join(sorted(offered))} offer it)" if offered else ""),
                f"drop {zone} from zones or {size} from instance_types {drop}",
                key_path=f"{key}.zones",
            )
    return True


def _quota(state: _Subscription, need: LaunchNeeds, location: str, size: str, sku: Any) -> None:
    """The size's family and regional vCPU quotas (Spot: the regional Spot quota)."""
    vcpus = next(
        (int(c.value) for c in sku.capabilities or () if str(c.name) == "vCPUs"),
        0,
    )
    usages = _usages(state, location)
    if not vcpus or usages is None:
        return
    names = ["lowPriorityCores"] if need.spot else [str(sku.family or ""), "cores"]
    for name in names:
        if name not in usages:
            continue
        limit, used = usages[name]
        subject = f"pool {need.pool}: vCPU quota {name} in {location} ({size})"
        judge_quota(state.reads, subject, "vCPUs", limit, used, vcpus, need.max_nodes, _ASK)


def _usages(state: _Subscription, location: str) -> dict[str, tuple[float, float]] | None:
    """Usage list of location, once -> (limit, current) by quota name (None: not read)."""
    if location not in state.usages:
        state.usages[location] = None
        try:
            with state.reads.read(USAGES_READ, f"vCPU quotas in {location}", Check.QUOTA):
                state.usages[location] = {
                    str(u.name.value): (float(u.limit), float(u.current_value))
                    for u in state.compute().usage.list(location)
                }
        except NotFoundAnswer:
            pass  # the SKU read has said it already
    return state.usages[location]
