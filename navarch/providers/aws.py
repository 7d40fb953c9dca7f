"""AWS EC2 provider (boto3).

Idempotency, two layers:
- RunInstances carries `ClientToken = request.launch_id` (deterministic per fleet, node and
  attempt; EC2 RunInstances ClientToken idempotency: the same token in the same region
  returns the original reservation instead of launching again);
- every instance and volume is tagged `navarch-launch=<launch_id>`, and provision first
  looks for a live instance with that tag and returns it, unless the reconciler's fresh
  inventory already says there is none (ProvisionRequest.known_absent: one request per
  node saved). This covers what the token does not: moto ignores ClientToken, and a
  token is per region.
A run killed after RunInstances therefore never leads to a second instance on the next run.

Only instances tagged `navarch-fleet=<fleet>` are listed, and terminate refuses any other
(docs/design.md, Safety rules, rule 1). Each listed instance carries EC2's own view of it
(Instance.cloud_status, from one paginated DescribeInstanceStatus per region): the system
and instance status checks and any scheduled event (see cloud_status_of). Instance metadata is IMDSv2-only (HttpTokens=required).

Retries are botocore's "standard" retry mode (throttling, 5xx, connection errors);
RunInstances uses a client with only RUN_INSTANCES_MAX_ATTEMPTS attempts, because an
InsufficientInstanceCapacity is a 5xx that the executor answers by trying the next place,
not by waiting here. Every SDK call runs inside `aws_errors`, the module's one error
boundary (navarch.providers.aws_errors), which translates botocore's exceptions.

Test seam: CLIENT_EVENT_HANDLERS holds (event name, handler) pairs registered on every
EC2 client this module creates (botocore event system), so tests can inject faults such
as InsufficientInstanceCapacity into a provider the CLI builds itself.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
)

from navarch.capabilities import Capability
from navarch.errors import (
    AuthError,
    ConfigError,
    LaunchSpent,
)
from navarch.inventory import (
    TAG_FLEET,
    TAG_LAUNCH,
    CloudStatus,
    Instance,
    InstanceState,
    Reservation,
)
from navarch.providers.aws_errors import aws_errors, error_code
from navarch.providers.aws_placement import (
    AwsPlacement,
    create_group,
    describe_reservations,
    efa_info,
    group_exists,
    launch,
    placed_params,
)
from navarch.providers.aws_preflight import preflight_findings
from navarch.providers.aws_status import aware_utc as _aware_utc
from navarch.providers.aws_status import cloud_status_of
from navarch.providers.aws_topology import has_topology, parse_topology, topology_requests
from navarch.providers.base import (
    AdoptFilter,
    ProvisionRequest,
    ensure_no_ownership_tags,
    ensure_owned,
    ensure_unowned,
)
from navarch.providers.optional import OptionalLookup, answer_excerpt, optional
from navarch.providers.preflight import Finding, LaunchNeeds

__all__ = [
    "CLIENT_EVENT_HANDLERS",
    "AwsPoolOptions",
    "AwsProvider",
    "AwsSettings",
    "create",
    "region_of",
    "run_instances_params",
    "to_instance",
]

#: EC2 instance states navarch lists; shutting-down and terminated no longer count.
LIVE_STATES = ("pending", "running", "stopping", "stopped")

#: botocore attempts for RunInstances (1 call + 1 retry): capacity failover must be quick.
RUN_INSTANCES_MAX_ATTEMPTS = 2
#: botocore attempts for every other EC2 call.
DEFAULT_MAX_ATTEMPTS = 4
#: HTTP connections each EC2 client keeps: at least the executor's providers.<name>.max_parallel
#: (schema maximum 256 is rare; botocore's default of 10 would churn connections beyond it).
MAX_POOL_CONNECTIONS = 64
#: DescribeInstances page size (MaxResults; EC2 allows 5-1000). Large fleets are listed
#: in pages of this many instances instead of one unbounded response.
DESCRIBE_PAGE_SIZE = 1000
#: DescribeInstanceStatus page size (MaxResults; EC2 allows 5-1000): one call per 1,000
#: running instances of a region, not one per instance.
STATUS_PAGE_SIZE = 1000
#: TerminateInstances accepts at most this many ids per call (EC2 API reference).
TERMINATE_BATCH = 1000

#: (botocore event name, handler) pairs registered on every EC2 client created here.
CLIENT_EVENT_HANDLERS: list[tuple[str, Callable[..., Any]]] = []

log = logging.getLogger("navarch.providers.aws")

#: Optional lookups (navarch.providers.optional): failed or denied, their answer is unknown
#: for the run, with a warning naming the IAM action (docs/policies/aws-reconciler.json).
TOPOLOGY_LOOKUP = OptionalLookup(
    "ec2:DescribeInstanceTopology", "topology", "block-aware placement"
)
PLACEMENT_GROUP_LOOKUP = OptionalLookup(
    "ec2:DescribePlacementGroups", "whether the placement group exists", "creating it when missing"
)

_REGION = re.compile(r"^([a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d+)")


def region_of(zone: str) -> str:
    """The region of an availability zone: "us-east-1a" -> "us-east-1".

    Also handles Local Zones ("us-west-2-lax-1a" -> "us-west-2") and GovCloud
    ("us-gov-west-1a" -> "us-gov-west-1"). Raises ConfigError for anything else.
    """
    match = _REGION.match(zone)
    if not match:
        raise ConfigError(f"not an AWS availability zone: {zone!r}", hint="write e.g. us-east-1a")
    return match.group(1)


@dataclass(frozen=True)
class AwsSettings:
    """The provider's fleet.yaml mapping: regions served and the credentials profile.

    regions: the provider's `region` first, then any extra `regions`, without repeats.
    """

    regions: tuple[str, ...]
    profile: str | None = None

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> AwsSettings:
        regions = [str(config["region"])] if config.get("region") else []
        regions += [str(r) for r in config.get("regions", ())]
        return cls(regions=tuple(dict.fromkeys(regions)), profile=config.get("profile") or None)


@dataclass(frozen=True)
class AwsPoolOptions:
    """A pool's `aws:` mapping (schemas/providers/aws.schema.json#/$defs/pool).

    subnets: zone -> subnet id; subnet_id: the subnet for zones not in subnets.
    root_volume_gb: root EBS volume size in GiB (None keeps the AMI's).
    spot_max_price: USD per instance-hour as a decimal string (None: on-demand price cap).
    """

    ami: str
    subnets: tuple[tuple[str, str], ...] = ()
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    iam_instance_profile: str | None = None
    key_name: str | None = None
    root_volume_gb: int | None = None
    root_device_name: str = "/dev/sda1"
    spot_max_price: str | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], *, pool: str = "") -> AwsPoolOptions:
        """Raises ConfigError when the pool has no `aws.ami`."""
        if not options.get("ami"):
            raise ConfigError(
                "aws pool needs an AMI",
                key_path=f"pools.{pool}.aws.ami" if pool else "aws.ami",
                hint="set aws: {ami: ami-...} on the pool",
            )
        max_price = options.get("spot_max_price")
        return cls(
            ami=str(options["ami"]),
            subnets=tuple(sorted((str(k), str(v)) for k, v in options.get("subnets", {}).items())),
            subnet_id=options.get("subnet_id") or None,
            security_group_ids=tuple(options.get("security_group_ids", ())),
            iam_instance_profile=options.get("iam_instance_profile") or None,
            key_name=options.get("key_name") or None,
            root_volume_gb=options.get("root_volume_gb"),
            root_device_name=options.get("root_device_name") or "/dev/sda1",
            spot_max_price=None if max_price is None else str(max_price),
        )

    def subnet_for(self, zone: str) -> str | None:
        for z, subnet in self.subnets:
            if z == zone:
                return subnet
        return self.subnet_id


def run_instances_params(request: ProvisionRequest) -> dict[str, Any]:
    """The RunInstances keyword arguments for one node (pure; no I/O).

    One instance (MinCount=MaxCount=1) in request.zone; ClientToken=request.launch_id
    (EC2 RunInstances ClientToken idempotency, <= 64 ASCII characters); request.tags on
    the instance and its volumes (so IAM aws:RequestTag conditions see them at launch);
    IMDSv2 only (MetadataOptions HttpTokens=required); one-time spot when request.spot.
    UserData is passed as text: boto3 base64-encodes it for RunInstances.
    Raises ConfigError for a missing AMI.
    """
    opts = AwsPoolOptions.from_mapping(request.options, pool=request.pool)
    tags = [{"Key": k, "Value": str(v)} for k, v in sorted(request.tags.items())]
    if "Name" not in request.tags:
        tags.append({"Key": "Name", "Value": request.node})
    params: dict[str, Any] = {
        "ImageId": opts.ami,
        "InstanceType": request.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": request.launch_id,
        "Placement": {"AvailabilityZone": request.zone},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
    }
    subnet = opts.subnet_for(request.zone)
    if subnet:
        params["SubnetId"] = subnet
    if opts.security_group_ids:
        params["SecurityGroupIds"] = list(opts.security_group_ids)
    if opts.iam_instance_profile:
        key = "Arn" if opts.iam_instance_profile.startswith("arn:") else "Name"
        params["IamInstanceProfile"] = {key: opts.iam_instance_profile}
    if opts.key_name:
        params["KeyName"] = opts.key_name
    if opts.root_volume_gb:
        params["BlockDeviceMappings"] = [
            {
                "DeviceName": opts.root_device_name,
                "Ebs": {
                    "VolumeSize": int(opts.root_volume_gb),
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ]
    if request.user_data:
        params["UserData"] = request.user_data
    if request.spot:
        spot: dict[str, Any] = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if opts.spot_max_price:
            spot["MaxPrice"] = opts.spot_max_price
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return params


def to_instance(provider: str, raw: Mapping[str, Any]) -> Instance | None:
    """An EC2 instance description (DescribeInstances / RunInstances shape) -> Instance.

    Returns None for states navarch does not list (shutting-down, terminated).
    tags: sorted (key, value) pairs; spot: InstanceLifecycle == "spot"; address: the
    private IPv4 address; launched_at: LaunchTime as an aware UTC datetime; host_id:
    Placement.HostId, set only for instances on a Dedicated Host (EC2 API reference,
    Placement), which the remediation ladder counts lemon faults against.
    """
    state = raw.get("State", {}).get("Name", "")
    if state not in LIVE_STATES:
        return None
    return Instance(
        provider=provider,
        instance_id=raw["InstanceId"],
        zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        instance_type=raw.get("InstanceType", ""),
        state=InstanceState(state),
        launched_at=_aware_utc(raw["LaunchTime"]),
        tags=tuple(sorted((t["Key"], t["Value"]) for t in raw.get("Tags", ()))),
        spot=raw.get("InstanceLifecycle") == "spot",
        address=raw.get("PrivateIpAddress") or None,
        host_id=raw.get("Placement", {}).get("HostId") or None,
    )


@dataclass
class AwsProvider:
    """EC2 in the regions of one fleet.yaml provider entry. See the module docstring."""

    #: What this provider can do (EC2 CreateTags, RebootInstances, DescribeInstanceStatus checks and scheduled events).
    capabilities: ClassVar[Capability] = (
        Capability.UPDATE_TAGS
        | Capability.REBOOT
        | Capability.INSTANCE_STATUS
        | Capability.MAINTENANCE_NOTICES
        | Capability.ADOPT
        | Capability.PREFLIGHT
    )
    #: The IAM action reading reservations and Capacity Blocks needs; without it they are
    #: unknown, with a warning (navarch.inventory.reservations_of).
    reservations_permission: ClassVar[str] = "ec2:DescribeCapacityReservations"

    name: str
    settings: AwsSettings
    fleet: str
    _clients: dict[tuple[str, bool], Any] = field(default_factory=dict, repr=False)
    _boto_session: boto3.session.Session | None = field(default=None, repr=False)
    #: (region, placement group) known to exist: looked up or created once per provider.
    _groups: set[tuple[str, str]] = field(default_factory=set, repr=False)
    _group_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _session(self) -> boto3.session.Session:
        # One session per provider: its loader caches the (large) EC2 service model, so
        # the second and later clients are cheap.
        if self._boto_session is None:
            self._boto_session = boto3.session.Session(profile_name=self.settings.profile)
        return self._boto_session

    def client(self, region: str, *, run: bool = False) -> Any:
        """The EC2 client for region (run=True: the few-attempt one for RunInstances)."""
        key = (region, run)
        if key not in self._clients:
            attempts = RUN_INSTANCES_MAX_ATTEMPTS if run else DEFAULT_MAX_ATTEMPTS
            config = Config(
                retries={"mode": "standard", "max_attempts": attempts},
                max_pool_connections=MAX_POOL_CONNECTIONS,
            )
            with aws_errors(what=f"EC2 client for {region}"):
                client = self._session().client("ec2", region_name=region, config=config)
            for event, handler in CLIENT_EVENT_HANDLERS:
                client.meta.events.register(event, handler)
            self._clients[key] = client
        return self._clients[key]

    def _region_for(self, zone: str) -> str:
        region = region_of(zone)
        if region not in self.settings.regions:
            raise ConfigError(
                f"zone {zone} is in region {region}, which provider {self.name} does not serve",
                key_path=f"providers.{self.name}.regions",
                hint=f"add {region} to the provider's region/regions",
            )
        return region

    def _describe(self, region: str, filters: list[dict[str, Any]]) -> Iterator[Mapping[str, Any]]:
        paginator = self.client(region).get_paginator("describe_instances")
        with aws_errors(what=f"DescribeInstances in {region}"):
            pages = paginator.paginate(
                Filters=filters, PaginationConfig={"PageSize": DESCRIBE_PAGE_SIZE}
            )
            for page in pages:
                for reservation in page.get("Reservations", ()):
                    yield from reservation.get("Instances", ())

    def _statuses(self, region: str) -> dict[str, CloudStatus]:
        """EC2's own status of every running instance in region, by instance id.

        DescribeInstanceStatus in pages of STATUS_PAGE_SIZE, unfiltered (it takes no tag
        filter, and instance ids would cost a call per batch): cost linear in the region's
        running instances. Raises the mapped errors.
        """
        paginator = self.client(region).get_paginator("describe_instance_status")
        out: dict[str, CloudStatus] = {}
        with aws_errors(what=f"DescribeInstanceStatus in {region}"):
            for page in paginator.paginate(PaginationConfig={"PageSize": STATUS_PAGE_SIZE}):
                for raw in page.get("InstanceStatuses", ()):
                    out[raw["InstanceId"]] = cloud_status_of(raw)
        return out

    def _topology(self, region: str, instances: Sequence[Instance]) -> dict[str, tuple[str, ...]]:
        """DescribeInstanceTopology for the running instances of types that have one
        (aws_topology): instance id -> network nodes. Optional (TOPOLOGY_LOOKUP): denied
        or failed, every topology is unknown (empty) this run, with a warning."""
        ids = [
            i.instance_id
            for i in instances
            if i.state is InstanceState.RUNNING and has_topology(i.instance_type)
        ]
        if not ids:
            return {}

        def ask() -> dict[str, tuple[str, ...]]:
            pages = []
            with aws_errors(what=f"DescribeInstanceTopology in {region}"):
                for params in topology_requests(ids):
                    pages.append(self.client(region).describe_instance_topology(**params))
            return parse_topology(pages)

        return optional(TOPOLOGY_LOOKUP, ask, {}, log, where=f" in {region}")

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Every live instance tagged navarch-fleet=<fleet> in the regions served.

        DescribeInstances (pages of DESCRIBE_PAGE_SIZE) filtered by tag and instance-state-name in
        pending/running/stopping/stopped, each with its CloudStatus from DescribeInstanceStatus
        (one paginated call per region that has fleet instances) and its topology from
        DescribeInstanceTopology (running instances of types that have one; optional: a
        failed or denied lookup leaves topology unknown, with a warning); sorted by id.
        Raises the mapped errors.
        """
        filters = [
            {"Name": f"tag:{TAG_FLEET}", "Values": [fleet]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        found: dict[str, Instance] = {}
        for region in self.settings.regions:
            mine = [
                inst
                for raw in self._describe(region, filters)
                if (inst := to_instance(self.name, raw)) is not None and inst.fleet == fleet
            ]
            statuses = self._statuses(region) if mine else {}
            fabric = self._topology(region, mine)
            for inst in mine:
                status = statuses.get(inst.instance_id)
                found[inst.instance_id] = replace(
                    inst,
                    cloud_status=inst.cloud_status if status is None else status,
                    topology=fabric.get(inst.instance_id, ()),
                )
        return sorted(found.values(), key=lambda i: i.instance_id)

    def provision(self, request: ProvisionRequest) -> Instance:
        """Launch one node in request.zone, or return the instance this launch id made.

        First, unless request.known_absent, DescribeInstances by tag
        navarch-launch=<launch_id> (live states): a run killed after RunInstances finds its
        instance here (with known_absent the caller's inventory, listed this run, answered
        that already). Otherwise RunInstances with
        run_instances_params(request) (ClientToken = launch id). Returns the Instance.
        Raises CapacityError(scope="zone"), PlacementError (type not offered in the zone),
        LaunchSpent (this launch id's instance already terminated), QuotaError, AuthError,
        TransientError, ConfigError (no AMI, zone outside the provider's regions),
        ProviderError.
        """
        region = self._region_for(request.zone)
        if not request.known_absent:
            existing = self._by_launch_id(region, request.fleet, request.launch_id)
            if existing is not None:
                return existing
        params = run_instances_params(request)
        placement = AwsPlacement.from_mapping(request.options, pool=request.pool)
        if placement.declared:
            params = self._placed(region, request, params, placement)
        what = f"RunInstances {request.instance_type}{' spot' if request.spot else ''}"
        client = self.client(region, run=True)

        def run(p: dict[str, Any]) -> Any:
            with aws_errors(zone=request.zone, what=what):
                return client.run_instances(**p)

        resp = launch(run, params, placement)
        raw = dict(resp["Instances"][0])
        if not raw.get("Tags"):
            # RunInstances responses normally echo the tags; describe otherwise.
            raw["Tags"] = params["TagSpecifications"][0]["Tags"]
        inst = to_instance(self.name, raw)
        if inst is None:
            # Only possible when EC2 replays an earlier launch (same ClientToken) whose
            # instance has since terminated; the executor must move to the next attempt.
            raise LaunchSpent(
                f"launch {request.launch_id} already ran and its instance "
                f"{raw.get('InstanceId')} is {raw.get('State', {}).get('Name')}",
                code="IdempotentLaunchTerminated",
            )
        return inst

    def _placed(
        self, region: str, request: ProvisionRequest, params: dict[str, Any], pl: AwsPlacement
    ) -> dict[str, Any]:
        """params with the pool's placement group (created once if missing), EFA interfaces
        and reservation (navarch.providers.aws_placement). Raises the mapped errors."""
        client = self.client(region)
        group = pl.placement_group
        # One lookup (and create) per group, not one per launch the executor runs at once.
        with self._group_lock:
            if group and (region, group) not in self._groups:
                self._ensure_group(client, region, request.zone, group)
                self._groups.add((region, group))
        with aws_errors(zone=request.zone, what="EFA of the launch"):
            efa = efa_info(client, request.instance_type) if pl.efa else None
        return placed_params(params, pl, efa)

    def _ensure_group(self, client: Any, region: str, zone: str, group: str) -> None:
        """The placement group exists, or is created. Its lookup is optional
        (PLACEMENT_GROUP_LOOKUP): failed or denied, the group is created anyway (a group
        that exists answers Duplicate); when creating is denied too, the launch names the
        group as declared and RunInstances says whether it exists. Raises the mapped
        errors of CreatePlacementGroup for a group known to be missing."""

        def exists() -> bool | None:
            with aws_errors(zone=zone, what=f"DescribePlacementGroups {group}"):
                return group_exists(client, group)

        found = optional(PLACEMENT_GROUP_LOOKUP, exists, None, log, where=f" in {region}")
        if found:
            return
        try:
            with aws_errors(zone=zone, what=f"CreatePlacementGroup {group}"):
                create_group(client, group, self.fleet)
        except AuthError as exc:
            if found is not None:
                raise
            log.warning(
                "%s; launching into placement group %s as declared",
                answer_excerpt(exc, 300),
                group,
            )

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]:
        """The Capacity Reservations (and Capacity Blocks) with these ids in the regions
        served (aws_placement.describe_reservations). Raises the mapped errors."""
        return describe_reservations(self.client, self.settings.regions, ids, self.name)

    def _by_launch_id(self, region: str, fleet: str, launch: str) -> Instance | None:
        filters = [
            {"Name": f"tag:{TAG_LAUNCH}", "Values": [launch]},
            {"Name": f"tag:{TAG_FLEET}", "Values": [fleet]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        for raw in self._describe(region, filters):
            inst = to_instance(self.name, raw)
            if inst is not None:
                return inst
        return None

    def terminate(self, instances: Sequence[Instance]) -> None:
        """TerminateInstances for instances, per region in batches of <= 1,000 ids.

        An instance already gone (InvalidInstanceID.NotFound) is success: a batch that
        fails on it is retried id by id so the others still terminate. Refuses (with
        ProviderError, before any call) an instance not tagged navarch-fleet=<fleet>
        (docs/design.md, Safety rules, rule 1). Raises the mapped errors.
        """
        ensure_owned(instances, self.fleet, "terminate")
        by_region: dict[str, list[str]] = {}
        for inst in instances:
            by_region.setdefault(region_of(inst.zone), []).append(inst.instance_id)
        for region, ids in sorted(by_region.items()):
            unique = sorted(set(ids))
            for start in range(0, len(unique), TERMINATE_BATCH):
                self._terminate_batch(region, unique[start : start + TERMINATE_BATCH])

    def reboot(self, instances: Sequence[Instance]) -> None:
        """RebootInstances for instances, per region in batches of <= 1,000 ids.

        EC2 RebootInstances: an OS reboot of the same instance (same id, volumes and
        addresses; a new kernel boot id); the call returns once the reboot is queued.
        Refuses (ProviderError, before any call) an instance not tagged
        navarch-fleet=<fleet> (docs/design.md, Safety rules, rule 1). Raises the mapped errors; an
        instance already gone is ProviderError (InvalidInstanceID.NotFound).
        """
        ensure_owned(instances, self.fleet, "reboot")
        by_region: dict[str, set[str]] = {}
        for inst in instances:
            by_region.setdefault(region_of(inst.zone), set()).add(inst.instance_id)
        for region, ids in sorted(by_region.items()):
            unique = sorted(ids)
            for start in range(0, len(unique), TERMINATE_BATCH):
                with aws_errors(what=f"RebootInstances in {region}"):
                    self.client(region).reboot_instances(
                        InstanceIds=unique[start : start + TERMINATE_BATCH]
                    )

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """CreateTags on one instance (adds or overwrites these keys, leaves the others).

        Refuses an instance not tagged navarch-fleet=<fleet> (safety rule 1). Raises the
        mapped errors (EC2 CreateTags; the reconciler's IAM policy allows it on the
        fleet's tag only, docs/aws.md).
        """
        ensure_owned([instance], self.fleet, "tag")
        ensure_no_ownership_tags(instance, tags)
        region = region_of(instance.zone)
        with aws_errors(what=f"CreateTags in {region}"):
            self.client(region).create_tags(
                Resources=[instance.instance_id],
                Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            )

    def list_unmanaged(self, match: AdoptFilter) -> Sequence[Instance]:
        """The running instances of the regions served without a navarch-fleet tag that
        `match` selects (its names against each instance's Name tag), sorted by id:
        DescribeInstances filtered by state running and by match's tags. Raises the
        mapped errors."""
        filters: list[dict[str, Any]] = [{"Name": "instance-state-name", "Values": ["running"]}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in match.tags]
        if match.instance_ids:
            filters.append({"Name": "instance-id", "Values": list(match.instance_ids)})
        found = [
            inst
            for region in self.settings.regions
            for raw in self._describe(region, filters)
            if (inst := to_instance(self.name, raw)) is not None
            and match.matches(inst, inst.tag("Name") or "")
        ]
        return sorted(found, key=lambda i: i.instance_id)

    def adopt(self, instance: Instance, tags: Mapping[str, str]) -> Instance:
        """CreateTags with navarch's ownership tags on one running instance (EC2 CreateTags
        adds keys in place: no stop, no reboot, the same launch time). Refuses an instance
        already owned (ensure_unowned). Returns the instance with the tags. Raises the
        mapped errors."""
        ensure_unowned(instance, tags)
        region = region_of(instance.zone)
        with aws_errors(what=f"CreateTags {instance.instance_id} in {region}"):
            self.client(region).create_tags(
                Resources=[instance.instance_id],
                Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            )
        merged = {**dict(instance.tags), **dict(tags)}
        return replace(instance, tags=tuple(sorted(merged.items())))

    def preflight(self, needs: Sequence[LaunchNeeds]) -> Sequence[Finding]:
        """What the pools' launches need, checked by reads in each pool's region
        (navarch.providers.aws_preflight). A read the policy denies is a skipped finding
        naming the IAM action; other failures are warnings. Never raises ProviderError."""
        return preflight_findings(
            self.name, self._session(), self.client, needs, region_of, AwsPoolOptions.from_mapping
        )

    def _terminate_batch(self, region: str, ids: list[str]) -> None:
        client = self.client(region)
        if self._terminate_ids(client, ids, what=f"TerminateInstances in {region}"):
            return
        # One id of the batch is already gone: retry id by id so the others still terminate.
        for instance_id in ids:
            self._terminate_ids(client, [instance_id], what=f"TerminateInstances {instance_id}")

    @staticmethod
    def _terminate_ids(client: Any, ids: list[str], *, what: str) -> bool:
        """TerminateInstances(ids): True when done, False when an id is already gone."""
        with aws_errors(what=what):
            try:
                client.terminate_instances(InstanceIds=ids)
            except ClientError as exc:
                if error_code(exc) == "InvalidInstanceID.NotFound":
                    return False
                raise
        return True


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> AwsProvider:
    """Build the AWS provider from its fleet.yaml mapping (schemas/providers/aws.schema.json).

    Regions: `region` plus `regions`; when neither is set, the default region of the AWS
    configuration chain (AWS_DEFAULT_REGION, ~/.aws/config). Credentials: the standard
    chain, or the named `profile`. Raises ConfigError when no region can be found.
    """
    del base_dir  # nothing file-relative in this provider
    settings = AwsSettings.from_mapping(config)
    if not settings.regions:
        with aws_errors(what="AWS configuration"):
            region = boto3.session.Session(profile_name=settings.profile).region_name
        if not region:
            raise ConfigError(
                "aws provider has no region",
                key_path=f"providers.{name}.region",
                hint="set region: us-east-1 (or AWS_DEFAULT_REGION)",
            )
        settings = AwsSettings(regions=(region,), profile=settings.profile)
    return AwsProvider(name, settings, fleet)
