"""The Provider seam: one implementation per cloud, none leaking SDK types.

Contract (tests/providers run it against each provider):
- list_instances(fleet) -> every instance of the fleet in the regions the provider serves,
  in states pending/running/stopping/stopped. Instances the provider can see that lack the
  fleet's tags may be included; the planner lists them as foreign and never touches them.
- provision(request) -> the Instance launched (or already launched: idempotent on
  request.launch_id). Raises CapacityError, QuotaError, AuthError, TransientError.
- terminate(instances) -> None; an instance already gone is success. Raises the same errors.
- reboot(instances) -> None: restart each instance in place through the cloud's API (EC2
  RebootInstances, Compute Engine instances.reset, Lambda Cloud instance restart, the local
  provider's reboot): same instance id, a new kernel boot id. Returns once the cloud has
  accepted it. Refuses (ProviderError, code ForeignInstance where the provider sets codes)
  an instance without this fleet's tags before any call; an instance already gone is an
  error (nothing was rebooted). Raises the same mapped errors. The remediation ladder's
  reboot rung and `navarch reboot` use it.
- update_tags(instance, tags) -> None: set these tags (labels on GCP) on one instance in
  place, leaving its other tags alone. Providers whose cloud cannot (Lambda Cloud) raise
  ProviderError; the planner asks only providers that declare Capability.UPDATE_TAGS.
- capabilities: a navarch.capabilities.Capability, what the provider can do beyond the
  calls above (tag updates, reboot, GPU reset, instance status, maintenance notices). The
  reconciler hands them to the planner as data (PlanOptions.capabilities).
  Every provider refuses (ensure_no_ownership_tags) a navarch-* key before any call.
- report_faulty_host(instance, fault) -> str (only on providers declaring
  Capability.REPORT_FAULTY_HOST; the HostReporter protocol): hand the instance's host back
  to the cloud as faulty (fault: the fault key, e.g. "xid:79"); returns one audit line.
- list_unmanaged(match) / adopt(instance, tags) (only on providers declaring
  Capability.ADOPT; the Adopter protocol): the running instances without a navarch-fleet
  tag that `match` selects, and writing navarch's ownership tags on one of them in place
  (`navarch adopt`), never restarting it.
- preflight(needs) (only on providers declaring Capability.PREFLIGHT; the Preflighter
  protocol, navarch.providers.preflight): what each pool's launches need, checked by reads.
Errors from the SDK are mapped in one function per provider (`map_error`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from navarch.capabilities import Capability
from navarch.errors import ConfigError, ProviderError
from navarch.inventory import RESERVED_TAG_PREFIX, TAG_FLEET, Instance, InstanceState


@dataclass(frozen=True)
class ProvisionRequest:
    """Launch one node.

    node: navarch node name (also the instance name where the cloud has names).
    zone: zone (or region, for Lambda) to launch in; instance_type: the cloud's type name.
    spot: launch as spot/preemptible capacity.
    tags: ownership tags plus the pool's labels.
    user_data: cloud-init text for the agent, already rendered. It holds the node's
    report-signing key, so it is left out of repr() (and so of every log line and
    traceback that prints a request).
    options: the pool's provider-specific settings from fleet.yaml (AMI, subnet, ...).
    known_absent: this run's fresh inventory (listed under the lease) holds no instance
    with this launch id, so a provider may skip its own pre-launch lookup (its launch
    token, e.g. EC2's ClientToken, still dedupes a launch a killed run left in flight).
    avoid_hosts: physical host ids not to land on (the pool's lemon hosts); block: the
    topology block (Instance.block) to land in, "" for anywhere. Only providers declaring
    Capability.PLACE_BY_HOST honour them; others launch as if both were empty.
    """

    fleet: str
    pool: str
    node: str
    zone: str
    instance_type: str
    spot: bool
    launch_id: str
    attempt: int
    tags: Mapping[str, str]
    user_data: str = field(default="", repr=False)
    options: Mapping[str, object] = field(default_factory=dict)
    known_absent: bool = False
    avoid_hosts: frozenset[str] = frozenset()
    block: str = ""


def ensure_owned(instances: Sequence[Instance], fleet: str, verb: str) -> None:
    """Safety rule 1 at the provider boundary: raise ProviderError (code ForeignInstance),
    before any cloud call, when an instance lacks navarch-fleet=<fleet>. verb names the
    refused operation ("terminate", "reboot", "tag") in the message."""
    foreign = sorted(i.instance_id for i in instances if i.fleet != fleet)
    if foreign:
        raise ProviderError(
            f"refusing to {verb} instances not tagged {TAG_FLEET}={fleet}: " + ", ".join(foreign),
            code="ForeignInstance",
        )


def ensure_no_ownership_tags(instance: Instance, tags: Mapping[str, str]) -> None:
    """Safety rule 1 for update_tags: raise ProviderError (code OwnershipTag), before any
    cloud call, when `tags` would write (or, with an empty value, clear) a navarch-* key.

    An ownership tag rewritten in place turns a fleet's instance into a foreign one that
    navarch then leaves running while it launches a replacement; the fleet schema reserves
    the prefix for labels, and this guard holds for every provider and plugin as well.
    """
    reserved = sorted(k for k in tags if k.startswith(RESERVED_TAG_PREFIX))
    if reserved:
        raise ProviderError(
            f"refusing to write ownership tags on {instance.instance_id}: "
            + ", ".join(reserved)
            + f" (keys starting {RESERVED_TAG_PREFIX} are navarch's own)",
            code="OwnershipTag",
        )


@dataclass(frozen=True)
class AdoptFilter:
    """Which unmanaged instances `navarch adopt` takes: every kind given must match.

    tags: (key, value) pairs the instance must all carry; names: shell globs (fnmatch), any
    of which its name must match (the Name tag on EC2, the instance or VM name on GCE and
    Azure, the instance id on the local provider); instance_ids: ids, any of which it must
    be. An empty filter would take every unmanaged instance and is refused (ConfigError).
    """

    tags: tuple[tuple[str, str], ...] = ()
    names: tuple[str, ...] = ()
    instance_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.tags or self.names or self.instance_ids):
            raise ConfigError(
                "adopt needs a filter: it would take every unmanaged instance otherwise",
                hint="pass --tag KEY=VALUE, --name-pattern GLOB or --instance-id ID",
            )

    def matches(self, inst: Instance, name: str) -> bool:
        """True when inst (its cloud name `name`) is running, carries no navarch-fleet
        tag and matches every kind of the filter given."""
        if inst.state is not InstanceState.RUNNING or inst.fleet is not None:
            return False
        if any(inst.tag(k) != v for k, v in self.tags):
            return False
        if self.names and not any(fnmatch.fnmatchcase(name, g) for g in self.names):
            return False
        return not self.instance_ids or inst.instance_id in self.instance_ids

    def describe(self) -> str:
        """The filter for people: "tag team=ml, name web-*, id i-1"."""
        parts = [f"tag {k}={v}" for k, v in self.tags]
        parts += [f"name {g}" for g in self.names] + [f"id {i}" for i in self.instance_ids]
        return ", ".join(parts)


def ensure_unowned(instance: Instance, tags: Mapping[str, str]) -> None:
    """Safety rule 1 for adopt: raise ProviderError (code OwnedInstance), before any cloud
    call, when the instance already carries a navarch-fleet tag (another fleet's, or this
    one's), or when `tags` hold anything but navarch-* ownership keys."""
    if instance.fleet is not None:
        raise ProviderError(
            f"refusing to adopt {instance.instance_id}: it is tagged {TAG_FLEET}="
            f"{instance.fleet} already",
            code="OwnedInstance",
        )
    other = sorted(k for k in tags if not k.startswith(RESERVED_TAG_PREFIX))
    if other:
        raise ProviderError(
            f"adopt writes only navarch's ownership tags, not {', '.join(other)}",
            code="OwnershipTag",
        )


class Provider(Protocol):
    """A cloud (or the embedded local simulator) that navarch launches nodes on."""

    name: str
    capabilities: Capability

    def list_instances(self, fleet: str) -> Sequence[Instance]: ...

    def provision(self, request: ProvisionRequest) -> Instance: ...

    def terminate(self, instances: Sequence[Instance]) -> None: ...

    def reboot(self, instances: Sequence[Instance]) -> None: ...

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None: ...


@runtime_checkable
class HostReporter(Protocol):
    """A provider that hands a failed physical host back to its cloud (Compute Engine
    instances.reportHostAsFaulty; the local provider records it). fault: the fault key
    (FaultKey.format(), e.g. "xid:79@gpu3"). Returns one audit line; raises the mapped
    ProviderError subclasses when the cloud refuses."""

    def report_faulty_host(self, instance: Instance, fault: str) -> str: ...


@runtime_checkable
class Adopter(Protocol):
    """A provider that takes running instances under management (`navarch adopt`).

    list_unmanaged(match) -> the running instances of the regions served that carry no
    navarch-fleet tag and match `match` (AdoptFilter.matches), sorted by instance id.
    adopt(instance, tags) -> the instance as listed after its ownership tags were written
    in place (tags: navarch-* keys only; ensure_unowned refuses anything else and an
    instance already owned, before any call). Neither restarts, stops or relaunches
    anything. Both raise the provider's mapped ProviderError subclasses."""

    def list_unmanaged(self, match: AdoptFilter) -> Sequence[Instance]: ...

    def adopt(self, instance: Instance, tags: Mapping[str, str]) -> Instance: ...


def capabilities_of(providers: Mapping[str, Provider]) -> dict[str, Capability]:
    """Each opened provider's declared capabilities by its fleet.yaml name: the data the
    planner reads (PlanOptions.capabilities). A provider declaring none (an older plugin)
    gets Capability.NONE: the planner then asks it for nothing beyond the base calls."""
    return {
        name: caps
        if isinstance(caps := getattr(p, "capabilities", None), Capability)
        else Capability.NONE
        for name, p in sorted(providers.items())
    }
