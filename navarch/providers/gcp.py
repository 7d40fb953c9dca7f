"""GCP Compute Engine provider (google-cloud-compute, REST transport).

Idempotency, two layers (GCE API semantics, https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert):
- instances.insert carries `requestId`, a UUID derived deterministically from the
  navarch launch id, so a retried call returns the original operation;
- the instance name is the navarch node name, so a second insert of the same node in
  the same zone is HTTP 409 `alreadyExists`, which provision treats as success.

Operations are waited on through an explicit ZoneOperationsClient built with the same
endpoint and credentials as the InstancesClient (google-cloud-compute's ExtendedOperation
polls through an internal client that ignores client_options). A stockout is reported
asynchronously: insert returns 200 and the *operation* ends DONE with
`ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]`; it is raised as CapacityError(scope="zone").

Retries are google.api_core Retry objects on each call (429/5xx and connection errors,
never capacity codes), bounded by the provider's `retry_deadline_s`.
Every SDK error is translated in `map_error` (gcp_error_map), the provider's one error boundary.

Each listed instance carries Compute Engine's own view of it (Instance.cloud_status), read
from the same aggregatedList answer at no extra call: REPAIRING (a host error being
repaired) and TERMINATED (stopped by Compute Engine: host error, preemption) are impaired,
RUNNING is ok, and resourceStatus.upcomingMaintenance is a scheduled system-maintenance
event (see cloud_status_of).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.cloud import compute_v1

from navarch.capabilities import Capability
from navarch.errors import ConfigError, ProviderError, TransientError
from navarch.inventory import (
    TAG_FLEET,
    CloudEvent,
    CloudStatus,
    Instance,
    InstanceHealth,
    InstanceState,
    Reservation,
)
from navarch.providers.base import (
    AdoptFilter,
    ProvisionRequest,
    ensure_no_ownership_tags,
    ensure_owned,
    ensure_unowned,
)
from navarch.providers.gcp_error_map import (
    error_codes,
    gcp_errors,
    map_error,
    transient,
)
from navarch.providers.gcp_hosts import host_of, report_request
from navarch.providers.gcp_placement import (
    GcpPlacement,
    ensure_policy,
    placed_instance,
    read_reservations,
)
from navarch.providers.gcp_preflight import preflight_findings
from navarch.providers.placement_fallback import launch_with_fallback
from navarch.providers.preflight import Finding, LaunchNeeds

__all__ = [
    "GcpProvider",
    "GcpSettings",
    "create",
    "instance_resource",
    "request_id",
]

log = logging.getLogger("navarch.providers.gcp")

#: Machine families whose GPUs come attached (no guestAccelerators needed); they must
#: use onHostMaintenance=TERMINATE (GCE GPU machine types documentation).
GPU_FAMILIES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")

#: Namespace for deterministic GCE request ids (uuid5 of the navarch launch id).
REQUEST_ID_NAMESPACE = uuid.UUID("7b5e0c43-7c4f-4f57-9b1e-6a0f2a7e9c11")

_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")

_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "REPAIRING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "PENDING_STOP": InstanceState.STOPPING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED,
    "SUSPENDED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,
}

DEFAULT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class Accelerator:
    """A GPU to attach to a machine type that has none built in (N1 machines)."""

    type: str
    count: int


@dataclass(frozen=True)
class GcpPoolOptions:
    """A pool's `gcp:` settings (schemas/providers/gcp.schema.json#/$defs/pool), defaulted."""

    image: str = DEFAULT_IMAGE
    disk_size_gb: int = 200
    disk_type: str = "pd-balanced"
    network: str = "global/networks/default"
    subnetwork: str | None = None
    external_ip: bool = True
    service_account: str = "default"
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    accelerators: Mapping[str, Accelerator] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> GcpPoolOptions:
        accels = {
            mt: Accelerator(type=str(a["type"]), count=int(a.get("count", 1)))
            for mt, a in dict(options.get("accelerators") or {}).items()
        }
        return cls(
            image=str(options.get("image", DEFAULT_IMAGE)),
            disk_size_gb=int(options.get("disk_size_gb", 200)),
            disk_type=str(options.get("disk_type", "pd-balanced")),
            network=str(options.get("network", "global/networks/default")),
            subnetwork=options.get("subnetwork"),
            external_ip=bool(options.get("external_ip", True)),
            service_account=str(options.get("service_account", "default")),
            scopes=tuple(options.get("scopes", DEFAULT_SCOPES)),
            accelerators=accels,
        )


@dataclass(frozen=True)
class GcpSettings:
    """The provider's keys from fleet.yaml (schemas/providers/gcp.schema.json#/$defs/provider)."""

    project: str
    api_endpoint: str | None = None
    anonymous: bool = False
    retry_deadline_s: float = 60.0
    operation_timeout_s: float = 300.0

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> GcpSettings:
        endpoint = config.get("api_endpoint") or None
        # The environment switch only ever applies to a configured endpoint, so a stray
        # NAVARCH_GCP_ANONYMOUS cannot strip credentials from calls to the real API.
        anonymous = bool(config.get("anonymous", False)) or (
            endpoint is not None and os.environ.get("NAVARCH_GCP_ANONYMOUS", "").lower() == "true"
        )
        return cls(
            project=str(config["project"]),
            api_endpoint=endpoint,
            anonymous=anonymous,
            retry_deadline_s=float(config.get("retry_deadline_s", 60.0)),
            operation_timeout_s=float(config.get("operation_timeout_s", 300.0)),
        )


def request_id(launch_id: str, place: str = "", action: str = "insert") -> str:
    """Deterministic GCE requestId: a uuid5 string (never the nil UUID).

    launch_id: navarch's launch id; place: "zone/machine-type" of this attempt. The place
    is part of the seed because GCE returns the *original* operation for a repeated
    requestId (project-wide, for at least 60 minutes), so a fallback to the next zone
    with the same id would only replay the first zone's stockout.
    Source: GCE insert requestId idempotency.
    """
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, f"{action}:{launch_id}:{place}"))


def region_of(zone: str) -> str:
    """'us-central1-a' -> 'us-central1' (GCE zone naming)."""
    return zone.rsplit("-", 1)[0]


def _needs_terminate_on_maintenance(machine_type: str, opts: GcpPoolOptions, spot: bool) -> bool:
    return spot or machine_type in opts.accelerators or machine_type.startswith(GPU_FAMILIES)


def check_labels(labels: Mapping[str, str]) -> None:
    """Raise ConfigError unless every label obeys GCE label rules.

    Source: GCE labels: keys start with a lower-case letter, keys and values use only
    lower-case letters, digits, '_' and '-', at most 63 characters each.
    """
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise ConfigError(f"label key {key!r} is not a valid GCP label key", key_path="labels")
        if not _LABEL_VALUE.match(value):
            raise ConfigError(
                f"label {key}={value!r}: GCP label values are lower case letters, digits, "
                "'_' and '-', at most 63 characters",
                key_path="labels",
            )


def instance_resource(request: ProvisionRequest) -> compute_v1.Instance:
    """Build the instances.insert body for one node (pure; no I/O).

    request.options is the pool's `gcp:` mapping. Shapes: machine type, disk type and
    accelerator type as zonal partial URLs; disk size in GB; labels = request.tags;
    metadata `user-data` = request.user_data (cloud-init). Spot: provisioningModel=SPOT,
    instanceTerminationAction=DELETE. GPU machines: onHostMaintenance=TERMINATE (GCE
    GPU restriction: GPU VMs cannot live-migrate). Raises ConfigError on invalid labels.
    """
    opts = GcpPoolOptions.from_mapping(request.options)
    labels = dict(request.tags)
    check_labels(labels)
    zone, mtype = request.zone, request.instance_type
    disk = compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=opts.image,
            disk_size_gb=opts.disk_size_gb,
            disk_type=f"zones/{zone}/diskTypes/{opts.disk_type}",
            labels=labels,
        ),
    )
    nic = compute_v1.NetworkInterface(network=opts.network)
    if opts.subnetwork:
        nic.subnetwork = opts.subnetwork
    if opts.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    scheduling = compute_v1.Scheduling()
    if request.spot:
        scheduling.provisioning_model = "SPOT"
        scheduling.instance_termination_action = "DELETE"
        scheduling.automatic_restart = False
    if _needs_terminate_on_maintenance(mtype, opts, request.spot):
        scheduling.on_host_maintenance = "TERMINATE"
    inst = compute_v1.Instance(
        name=request.node,
        machine_type=f"zones/{zone}/machineTypes/{mtype}",
        labels=labels,
        disks=[disk],
        network_interfaces=[nic],
        scheduling=scheduling,
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="user-data", value=request.user_data)]
        ),
        service_accounts=[
            compute_v1.ServiceAccount(email=opts.service_account, scopes=list(opts.scopes))
        ],
    )
    accel = opts.accelerators.get(mtype)
    if accel is not None:
        inst.guest_accelerators = [
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{accel.type}",
                accelerator_count=accel.count,
            )
        ]
    return inst


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] if url else ""


def _launched_at(ts: str) -> datetime:
    if not ts:
        return datetime.fromtimestamp(0, UTC)
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC)


#: GCE statuses that mean Compute Engine itself took the instance out of service. navarch
#: never stops an instance, so TERMINATED is a host error or a preemption, never its own.
_IMPAIRED_STATUSES = {
    "REPAIRING": "REPAIRING: Compute Engine is repairing the instance after a host error",
    "TERMINATED": "TERMINATED: Compute Engine stopped the instance",
}


def cloud_status_of(inst: compute_v1.Instance) -> CloudStatus:
    """Compute Engine's own view of one instance.

    impaired for REPAIRING or TERMINATED (detail names the status and statusMessage; since:
    lastStopTimestamp when given), ok for RUNNING, unknown otherwise. event: system-maintenance
    when resourceStatus.upcomingMaintenance is set, its windowStartTime as the deadline.
    Source: Compute Engine docs, "Instance lifecycle" (REPAIRING, TERMINATED), "Host events",
    and the v1 Instance resource (resourceStatus.upcomingMaintenance).
    """
    status = inst.status
    if status in _IMPAIRED_STATUSES:
        detail = _IMPAIRED_STATUSES[status]
        if inst.status_message:
            detail += f" ({inst.status_message})"
        since = _launched_at(inst.last_stop_timestamp) if inst.last_stop_timestamp else None
        health, out_detail = InstanceHealth.IMPAIRED, detail
    else:
        since, out_detail = None, ""
        health = InstanceHealth.OK if status == "RUNNING" else InstanceHealth.UNKNOWN
    event, deadline = None, None
    rs = inst.resource_status
    if "resource_status" in inst and "upcoming_maintenance" in rs:
        event = CloudEvent.SYSTEM_MAINTENANCE
        start = rs.upcoming_maintenance.window_start_time
        deadline = _launched_at(start) if start else None
    return CloudStatus(health, out_detail, since=since, event=event, event_deadline=deadline)


def to_instance(provider: str, inst: compute_v1.Instance) -> Instance | None:
    """Convert a GCE instance to navarch's Instance; None for states navarch does not list.

    Status mapping (GCE instance lifecycle): PROVISIONING/STAGING/REPAIRING -> pending,
    RUNNING -> running, PENDING_STOP/STOPPING/SUSPENDING -> stopping,
    STOPPED/SUSPENDED/TERMINATED -> stopped; DEPROVISIONING (being deleted) is not listed.
    instance_id is the instance name (unique per project and zone; navarch names nodes
    uniquely per fleet). Spot from scheduling.provisioningModel (or legacy preemptible).
    host_id and topology from resourceStatus where Compute Engine fills it (gcp_hosts.host_of).
    """
    state = _STATES.get(inst.status)
    if state is None:
        return None
    address = None
    for nic in inst.network_interfaces:
        for ac in nic.access_configs:
            if ac.nat_i_p:
                address = ac.nat_i_p
                break
        address = address or nic.network_i_p or None
        if address:
            break
    sched = inst.scheduling
    spot = sched.provisioning_model == "SPOT" or bool(sched.preemptible)
    host, topology = host_of(inst)
    return Instance(
        provider=provider,
        instance_id=inst.name,
        zone=_last(inst.zone),
        instance_type=_last(inst.machine_type),
        state=state,
        launched_at=_launched_at(inst.creation_timestamp),
        tags=tuple(sorted(dict(inst.labels).items())),
        spot=spot,
        address=address,
        cloud_status=cloud_status_of(inst),
        host_id=host,
        topology=topology,
    )


class GcpProvider:
    """navarch Provider on one GCP project (see the module docstring for semantics)."""

    #: What this provider can do (setLabels, instances.reset, status and upcomingMaintenance).
    capabilities: ClassVar[Capability] = (
        Capability.UPDATE_TAGS
        | Capability.REBOOT
        | Capability.INSTANCE_STATUS
        | Capability.MAINTENANCE_NOTICES
        | Capability.REPORT_FAULTY_HOST
        | Capability.ADOPT
        | Capability.PREFLIGHT
    )
    #: The permission reading reservations needs; without it they are unknown, with a
    #: warning (navarch.inventory.reservations_of; Compute Engine IAM permissions).
    reservations_permission: ClassVar[str] = "compute.reservations.get"

    def __init__(self, name: str, settings: GcpSettings, *, fleet: str) -> None:
        self.name = name
        self.settings = settings
        self.fleet = fleet
        self._instances: compute_v1.InstancesClient | None = None
        self._operations: compute_v1.ZoneOperationsClient | None = None
        #: (region, compact placement policy) known to exist: looked up or created once.
        self._policies: set[tuple[str, str]] = set()
        self._policy_lock = threading.Lock()
        self._retry = Retry(
            predicate=transient,
            initial=1.0,
            maximum=10.0,
            multiplier=2.0,
            timeout=settings.retry_deadline_s,
        )

    # -- clients -------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"transport": "rest"}
        if self.settings.api_endpoint:
            kwargs["client_options"] = {"api_endpoint": self.settings.api_endpoint}
        if self.settings.anonymous:
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
        return kwargs

    @property
    def instances_client(self) -> compute_v1.InstancesClient:
        if self._instances is None:
            with gcp_errors(what="client"):
                self._instances = compute_v1.InstancesClient(**self._client_kwargs())
        return self._instances

    @property
    def operations_client(self) -> compute_v1.ZoneOperationsClient:
        # Same endpoint and credentials as instances_client: the SDK's built-in poller
        # would otherwise talk to compute.googleapis.com whatever api_endpoint says.
        if self._operations is None:
            with gcp_errors(what="client"):
                self._operations = compute_v1.ZoneOperationsClient(**self._client_kwargs())
        return self._operations

    def preflight(self, needs: Sequence[LaunchNeeds]) -> Sequence[Finding]:
        """What the pools' launches need, checked by reads (navarch.providers.gcp_preflight):
        a read the role denies is a skipped finding naming the permission, other failures
        are warnings. Never raises a cloud error."""
        kwargs, made = self._client_kwargs(), dict[str, Any]()

        def client(kind: str) -> Any:
            if kind not in made:
                made[kind] = getattr(compute_v1, kind)(**kwargs)
            return made[kind]

        return preflight_findings(
            self.name, self.settings.project, client, needs, GcpPoolOptions.from_mapping
        )

    # -- Provider contract ------------------------------------------------------------

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Every instance labelled navarch-fleet=<fleet> in the project, all zones.

        One instances.aggregatedList call (paged by the SDK) with a label filter.
        Returns Instances sorted by (zone, name). Raises AuthError, TransientError,
        ConfigError (unknown project).
        """
        req = compute_v1.AggregatedListInstancesRequest(
            project=self.settings.project,
            filter=f'labels.{TAG_FLEET} = "{fleet}"',
        )
        out: list[Instance] = []
        with gcp_errors(what="list instances"):
            for _scope, scoped in self.instances_client.aggregated_list(
                request=req, retry=self._retry
            ):
                for inst in scoped.instances:
                    if dict(inst.labels).get(TAG_FLEET) != fleet:
                        continue
                    converted = to_instance(self.name, inst)
                    if converted is not None:
                        out.append(converted)
        return sorted(out, key=lambda i: (i.zone, i.instance_id))

    def provision(self, request: ProvisionRequest) -> Instance:
        """Insert one instance named request.node in request.zone and wait for it.

        Idempotent on request.launch_id: requestId = request_id(launch_id); an existing
        instance of that name that belongs to this fleet is returned (409 alreadyExists).
        Waits on the zone operation (operation_timeout_s); if it is still running then,
        the instance is returned as pending and the next run observes how it ended.
        Raises CapacityError(scope="zone") on a stockout, PlacementError (machine or
        accelerator type not offered in the zone), QuotaError, AuthError, TransientError,
        ConfigError (bad image/network or labels). A stockout of an instance in a compact
        placement policy means the policy has no room: the pool's placement_fallback
        decides (navarch.providers.placement_fallback).
        """
        zone = request.zone
        placement = GcpPlacement.from_mapping(request.options, pool=request.pool)
        if placement.placement_policy:
            self._ensure_policy(region_of(zone), placement.placement_policy)
        place = f"{zone}/{request.instance_type}"
        policy = placement.placement_policy
        op = launch_with_fallback(
            lambda: self._insert(request, placement, place),
            # Its own requestId: GCE would answer a repeated one with the first stockout.
            lambda: self._insert(
                request, replace(placement, placement_policy=None), place + "/outside"
            ),
            group=f"placement policy {policy}" if policy else "",
            fallback=placement.placement_fallback,
            where=f"{request.instance_type} in {zone}",
            log=log,
        )
        if op is None:
            return self._existing(request)
        if op.status == compute_v1.Operation.Status.DONE:
            return self._get(zone, request.node)
        # Still running after operation_timeout_s: report it pending; the next run's list
        # shows whether it came up (or was removed by a late stockout).
        try:
            return self._get(zone, request.node)
        except ConfigError:
            return Instance(
                provider=self.name,
                instance_id=request.node,
                zone=zone,
                instance_type=request.instance_type,
                state=InstanceState.PENDING,
                launched_at=datetime.now(UTC),
                tags=tuple(sorted(dict(request.tags).items())),
                spot=request.spot,
            )

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]:
        """The specific reservations the pools consume, by the names they give
        (gcp_placement.read_reservations): no call when none is named. Raises the mapped
        errors."""
        with gcp_errors(what="list reservations"):
            return read_reservations(self._client_kwargs(), self.settings.project, ids, self.name)

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Delete each instance by zone and name; an instance already gone is success.

        Issues every delete first, then waits on each operation. Refuses (ProviderError)
        an instance without this fleet's navarch-fleet label (safety rule 1).
        Raises AuthError, TransientError.
        """
        ensure_owned(instances, self.fleet, "terminate")
        pending: list[tuple[compute_v1.Operation, str]] = []
        for inst in instances:
            with gcp_errors(zone=inst.zone, what=f"delete {inst.instance_id}"):
                op = self._delete(inst)
            if op is None:
                continue
            pending.append((op, inst.zone))
        for op, zone in pending:
            try:
                self._wait(op, zone, what="delete")
            except ConfigError:
                continue  # the operation failed with notFound: already gone

    def _delete(self, inst: Instance) -> compute_v1.Operation | None:
        """instances.delete of one instance; None when it is already gone."""
        try:
            return self.instances_client.delete_unary(
                request=compute_v1.DeleteInstanceRequest(
                    project=self.settings.project,
                    zone=inst.zone,
                    instance=inst.instance_id,
                    request_id=request_id(
                        str(inst.launch_id), f"{inst.zone}/{inst.instance_id}", "delete"
                    ),
                ),
                retry=self._retry,
            )
        except gexc.NotFound:
            return None

    def reboot(self, instances: Sequence[Instance]) -> None:
        """instances.reset each instance (a hard reset of the same VM: same name, disks and
        addresses, a new kernel boot id), then wait on every operation.

        Each call has its own random requestId: GCE dedupes a requestId for at least 60
        minutes, so a deterministic one would swallow a second reboot of the same node
        within the hour (the ladder's next rung); the client's own retries of one call
        reuse it. Refuses (ProviderError, before any call) an instance without this
        fleet's label (safety rule 1). Raises the mapped errors; a gone instance is
        ConfigError/ProviderError as map_error says for notFound.
        """
        ensure_owned(instances, self.fleet, "reset")
        pending: list[tuple[compute_v1.Operation, str]] = []
        for inst in instances:
            with gcp_errors(zone=inst.zone, what=f"reset {inst.instance_id}"):
                op = self.instances_client.reset_unary(
                    request=compute_v1.ResetInstanceRequest(
                        project=self.settings.project,
                        zone=inst.zone,
                        instance=inst.instance_id,
                        request_id=str(uuid.uuid4()),
                    ),
                    retry=self._retry,
                )
            pending.append((op, inst.zone))
        for op, zone in pending:
            self._wait(op, zone, what="reset")

    def report_faulty_host(self, instance: Instance, fault: str) -> str:
        """instances.reportHostAsFaulty (gcp_hosts), waited on; a random requestId as for
        reset. Compute Engine takes it for running reservation-bound A4X/A4/A3 Ultra VMs
        only (else a mapped error). Refuses a foreign instance. Returns an audit line."""
        ensure_owned([instance], self.fleet, "report")
        with gcp_errors(zone=instance.zone, what=f"reportHostAsFaulty {instance.instance_id}"):
            op = self.instances_client.report_host_as_faulty_unary(
                request=report_request(
                    self.settings.project,
                    instance.zone,
                    instance.instance_id,
                    fault,
                    str(uuid.uuid4()),
                ),
                retry=self._retry,
            )
        self._wait(op, instance.zone, what="reportHostAsFaulty")
        host = instance.host_id or "(host not exposed)"
        return f"host {host} reported faulty to Compute Engine ({fault})"

    def list_unmanaged(self, match: AdoptFilter) -> Sequence[Instance]:
        """The running instances of the project without a navarch-fleet label that
        `match` selects (its names against the instance name): one instances.aggregatedList
        filtered by match's labels. Sorted by (zone, name). Raises the mapped errors."""
        flt = " AND ".join(f'(labels.{k} = "{v}")' for k, v in match.tags)
        req = compute_v1.AggregatedListInstancesRequest(project=self.settings.project, filter=flt)
        out: list[Instance] = []
        with gcp_errors(what="list instances to adopt"):
            for _scope, scoped in self.instances_client.aggregated_list(
                request=req, retry=self._retry
            ):
                for raw in scoped.instances:
                    inst = to_instance(self.name, raw)
                    if inst is not None and match.matches(inst, inst.instance_id):
                        out.append(inst)
        return sorted(out, key=lambda i: (i.zone, i.instance_id))

    def adopt(self, instance: Instance, tags: Mapping[str, str]) -> Instance:
        """instances.setLabels with navarch's ownership labels added to the instance's own
        (guarded by its label fingerprint; the instance keeps running). Refuses an owned
        instance (ensure_unowned); ProviderError (NotFound) for one that is gone."""
        ensure_unowned(instance, tags)
        check_labels(tags)
        with gcp_errors(zone=instance.zone, what=f"setLabels {instance.instance_id}"):
            op = self._set_labels(instance, tags)
        if op is None:
            raise ProviderError(f"{instance.instance_id} is gone", code="NotFound")
        self._wait(op, instance.zone, what="setLabels")
        merged = {**dict(instance.tags), **dict(tags)}
        return replace(instance, tags=tuple(sorted(merged.items())))

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """instances.setLabels on one instance: its current labels with these set, guarded
        by the label fingerprint just read (Compute Engine's optimistic concurrency).
        Refuses an instance without this fleet's label; raises the mapped errors."""
        ensure_owned([instance], self.fleet, "label")
        ensure_no_ownership_tags(instance, tags)
        with gcp_errors(zone=instance.zone, what=f"setLabels {instance.instance_id}"):
            op = self._set_labels(instance, tags)
        if op is not None:
            self._wait(op, instance.zone, what="setLabels")

    def _set_labels(
        self, instance: Instance, tags: Mapping[str, str]
    ) -> compute_v1.Operation | None:
        """instances.get then setLabels; None when the instance is already gone."""
        try:
            current = self.instances_client.get(
                project=self.settings.project,
                zone=instance.zone,
                instance=instance.instance_id,
                retry=self._retry,
            )
            op = self.instances_client.set_labels_unary(
                request=compute_v1.SetLabelsInstanceRequest(
                    project=self.settings.project,
                    zone=instance.zone,
                    instance=instance.instance_id,
                    instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                        labels={**dict(current.labels), **dict(tags)},
                        label_fingerprint=current.label_fingerprint,
                    ),
                ),
                retry=self._retry,
            )
        except gexc.NotFound:
            return None
        return op

    # -- helpers -------------------------------------------------------------------------

    def _insert(
        self, request: ProvisionRequest, placement: GcpPlacement, place: str
    ) -> compute_v1.Operation | None:
        """instances.insert of request's instance with placement and wait on it -> the
        operation, or None when an instance of that name exists (409 alreadyExists).
        place seeds the requestId (request_id). Raises the mapped errors: a stockout,
        also of a full placement policy, is a CapacityError."""
        zone = request.zone
        body = placed_instance(
            instance_resource(request), placement, self.settings.project, region_of(zone)
        )
        insert = compute_v1.InsertInstanceRequest(
            project=self.settings.project,
            zone=zone,
            instance_resource=body,
            request_id=request_id(request.launch_id, place),
        )
        with gcp_errors(zone=zone, what="insert"):
            try:
                op = self.instances_client.insert_unary(request=insert, retry=self._retry)
            except gexc.Conflict as exc:
                if "alreadyExists" not in error_codes(exc):
                    raise
                return None
        return self._wait(op, zone, what="insert")

    def _ensure_policy(self, region: str, name: str) -> None:
        """The compact placement policy `name` in region, created if missing, once per
        provider (gcp_placement.ensure_policy). Raises the mapped errors."""
        with self._policy_lock:
            if (region, name) not in self._policies:
                with gcp_errors(what=f"placement policy {name}"):
                    ensure_policy(
                        self._client_kwargs(), self.settings.project, region, name, self.fleet
                    )
                self._policies.add((region, name))

    def _wait(self, op: compute_v1.Operation, zone: str, *, what: str) -> compute_v1.Operation:
        """Wait on a zone operation; raise the mapped error it ended with, if any."""
        if op.status != compute_v1.Operation.Status.DONE:
            with gcp_errors(zone=zone, what=f"{what} (waiting)"):
                op = self.operations_client.wait(
                    project=self.settings.project,
                    zone=zone,
                    operation=op.name,
                    retry=self._retry,
                    timeout=self.settings.operation_timeout_s,
                )
        if op.error and op.error.errors:
            status = op.http_error_status_code or 500
            err = gexc.from_http_status(  # type: ignore[no-untyped-call]
                status,
                op.http_error_message or "operation failed",
                errors=list(op.error.errors),
            )
            raise map_error(err, zone=zone, what=what) from err
        return op

    def _get(self, zone: str, name: str) -> Instance:
        with gcp_errors(zone=zone, what=f"get {name}"):
            inst = self.instances_client.get(
                project=self.settings.project, zone=zone, instance=name, retry=self._retry
            )
        converted = to_instance(self.name, inst)
        if converted is None:
            raise TransientError(f"GCP instance {name} in {zone} is {inst.status}", code="status")
        return converted

    def _existing(self, request: ProvisionRequest) -> Instance:
        found = self._get(request.zone, request.node)
        if found.fleet != request.fleet:
            raise ProviderError(
                f"GCP instance name {request.node} in {request.zone} is taken by an instance "
                f"not labelled {TAG_FLEET}={request.fleet}; rename the fleet or remove it",
                code="alreadyExists",
            )
        return found


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> GcpProvider:
    """Build the GCP provider from its fleet.yaml mapping (schema-checked: project required).

    Credentials: Application Default Credentials, or AnonymousCredentials when
    `anonymous: true` (or env NAVARCH_GCP_ANONYMOUS=true) together with `api_endpoint`
    (tests, private fakes). Raises ConfigError when project is missing, or anonymous is
    set without api_endpoint.
    """
    del base_dir  # nothing file-relative in this provider
    if not config.get("project"):
        raise ConfigError("gcp provider needs a project", key_path=f"providers.{name}.project")
    if config.get("anonymous") and not config.get("api_endpoint"):
        raise ConfigError(
            "anonymous: true needs api_endpoint (the public Compute API refuses anonymous calls)",
            key_path=f"providers.{name}.anonymous",
            hint="remove anonymous, or point api_endpoint at your fake or private endpoint",
        )
    return GcpProvider(name, GcpSettings.from_mapping(config), fleet=fleet)
