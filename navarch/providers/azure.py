"""Azure provider: virtual machines through azure-mgmt-compute and azure-mgmt-network.

Idempotency (ARM semantics: PUT creates or updates a resource *by name*): the VM is named
after the navarch node, its NIC `<node>-nic`, its OS disk `<node>-osdisk`, so a launch
repeated by a killed run's successor PUTs the same resources again instead of creating
new ones. A VM that already exists carrying this launch id is returned without a PUT.

Places: a pool's zone is written `<location>-<zone number>` (`eastus-1`) for a zonal
launch or `<location>` (`eastus`) for a regional one, so one provider serves several
locations. Listing reads every VM of the configured resource groups (foreign VMs
included: the planner lists them as foreign and never touches them).

Spot: priority Spot, eviction policy Delete, billing max price from the pool's
`azure.max_price` (-1: up to the on-demand price). Cloud-init user-data goes in
`osProfile.customData` (base64). Terminate deletes the VM, then its NIC and OS disk (the
VM also carries deleteOption Delete for both; the explicit deletes clean up after a
launch that failed between NIC and VM).

Each listed VM carries Azure's own view of it (Instance.cloud_status) from its instance
view, asked for in the same list call (`$expand=instanceView`): VM health unhealthy (the
Application Health extension, where installed) or a power state Azure stopped or
deallocated is impaired, and a planned-maintenance window is a scheduled event (see
cloud_status_of). Resource Health is a separate API and is not read.

Errors are translated in `map_error` from one table, `ERROR_CODES` (tests list every
code). Retries are the SDK's own RetryPolicy (retry_total, retry_backoff_factor), never a
loop here. Credentials: azure-identity's DefaultAzureCredential; `base_url` plus
NAVARCH_AZURE_TOKEN (tests only) sends that static bearer token to a local fake instead.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    DecodeError,
    DeserializationError,
    HttpResponseError,
    ResourceNotFoundError,
)
from azure.core.pipeline.policies import SansIOHTTPPolicy

from navarch.capabilities import Capability
from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    NavarchError,
    ProviderError,
    QuotaError,
    TransientError,
    map_exceptions,
)
from navarch.inventory import (
    TAG_LAUNCH,
    CloudEvent,
    CloudStatus,
    Instance,
    InstanceHealth,
    InstanceState,
    Reservation,
)
from navarch.providers.azure_placement import (
    AzurePlacement,
    placed_vm_body,
    ppg_body,
    read_reservation_groups,
)
from navarch.providers.azure_preflight import preflight_findings, split_zone
from navarch.providers.base import (
    AdoptFilter,
    ProvisionRequest,
    ensure_no_ownership_tags,
    ensure_owned,
    ensure_unowned,
)
from navarch.providers.optional import answer_excerpt
from navarch.providers.placement_fallback import launch_with_fallback
from navarch.providers.preflight import Finding, LaunchNeeds

__all__ = ["ERROR_CODES", "AzureProvider", "create", "map_error", "split_zone", "vm_body"]

log = logging.getLogger("navarch.providers.azure")

#: ARM error codes -> navarch error. Sources: "Troubleshoot allocation failures" and
#: "Resolve errors for SKU not available" (Azure Virtual Machines docs), "Resolve errors
#: for resource quotas", ARM throttling docs. OperationNotAllowed is a quota error only
#: when its message speaks of quota (see map_error); otherwise a ProviderError.
ERROR_CODES: dict[str, type[ProviderError]] = {
    "SkuNotAvailable": CapacityError,
    "AllocationFailed": CapacityError,
    "ZonalAllocationFailed": CapacityError,
    "OverconstrainedAllocationRequest": CapacityError,
    "OverconstrainedZonalAllocationRequest": CapacityError,
    "QuotaExceeded": QuotaError,
    "OperationNotAllowed": QuotaError,
    "AuthorizationFailed": AuthError,
    "AuthenticationFailed": AuthError,
    "InvalidAuthenticationToken": AuthError,
    "ExpiredAuthenticationToken": AuthError,
    "LinkedAuthorizationFailed": AuthError,
    "TooManyRequests": TransientError,
    "RetryableError": TransientError,
    "InternalServerError": TransientError,
    "ServiceUnavailable": TransientError,
}

_STATES = {
    "Creating": InstanceState.PENDING,
    "Updating": InstanceState.RUNNING,
    "Succeeded": InstanceState.RUNNING,
    "Migrating": InstanceState.RUNNING,
    "Deleting": InstanceState.STOPPING,
    "Failed": InstanceState.STOPPED,
    "Canceled": InstanceState.STOPPED,
}

TOKEN_ENV = "NAVARCH_AZURE_TOKEN"
DEFAULT_IMAGE = {
    "publisher": "Canonical",
    "offer": "ubuntu-24_04-lts",
    "sku": "server",
    "version": "latest",
}


def _code_and_message(exc: HttpResponseError) -> tuple[str, str]:
    err = getattr(exc, "error", None)
    code = str(getattr(err, "code", "") or getattr(exc, "error_code", "") or "")
    message = str(getattr(err, "message", "") or exc.message or "")
    if err is None and _page_answer(exc):
        message += f", answered with a body that is not ARM's JSON: {_body_excerpt(exc)}"
    return code, answer_excerpt(message, 300)


def _page_answer(exc: HttpResponseError) -> bool:
    """Whether the answer behind exc carried a body that is not JSON (an HTML page)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    return bool(response is not None and "json" not in str(headers.get("Content-Type", "")))


def _body_excerpt(exc: BaseException) -> str:
    """An excerpt of the answer an HttpResponseError carries, else of the error itself."""
    response = getattr(exc, "response", None)
    try:
        return answer_excerpt(response.text() if response is not None else exc)
    except Exception:  # a streamed or closed body: the error's own text says enough
        return answer_excerpt(exc)


def map_error(exc: BaseException, *, zone: str = "", what: str = "") -> NavarchError:
    """Translate an azure-core exception into navarch's provider errors (ERROR_CODES,
    then HTTP status: 401/403 AuthError, 429/5xx TransientError; connection errors
    TransientError; an answer that is not JSON, DecodeError, DeserializationError or
    JSONDecodeError: an outage or proxy page, TransientError). Capacity and quota errors carry scope "zone" (a
    zone was named) or "region". Every message is one line."""
    where = f" {what}" if what else ""
    scope = "zone" if "-" in zone else "region"
    if isinstance(exc, DecodeError | DeserializationError | json.JSONDecodeError):
        return TransientError(
            f"Azure{where}: ARM answered with a body that is not its JSON (an outage or proxy "
            f"page?): {_body_excerpt(exc)}",
            code=type(exc).__name__,
        )
    if isinstance(exc, ClientAuthenticationError):
        return AuthError(
            f"Azure authentication failed{where}: {answer_excerpt(exc.message, 300)}",
            code="AuthenticationFailed",
        )
    if isinstance(exc, HttpResponseError):
        code, message = _code_and_message(exc)
        kind = ERROR_CODES.get(code)
        if kind is QuotaError and code == "OperationNotAllowed" and "quota" not in message.lower():
            kind = None
        if kind is None:
            status = exc.status_code or 0
            if status in (401, 403):
                kind = AuthError
            elif status == 429 or status >= 500:
                kind = TransientError
        text = f"Azure{where}: {code or exc.status_code}: {message}"
        if kind in (CapacityError, QuotaError):
            return kind(text, code=code, scope=scope)
        if kind is not None:
            return kind(text, code=code)
        return ProviderError(text, code=code)
    if isinstance(exc, AzureError):  # ServiceRequestError, ServiceResponseError: no answer
        return TransientError(f"Azure{where}: {answer_excerpt(exc, 300)}", code=type(exc).__name__)
    return ProviderError(f"Azure{where}: {answer_excerpt(repr(exc), 300)}")


def azure_errors(*, zone: str = "", what: str = "") -> AbstractContextManager[None]:
    """The one boundary every Azure management call goes through: azure-core exceptions
    (HTTP errors, no answer, authentication) leave as map_error(exc, zone, what)."""

    def translate(exc: Exception) -> NavarchError | None:
        if isinstance(exc, AzureError | DeserializationError | json.JSONDecodeError):
            return map_error(exc, zone=zone, what=what)
        return None

    return map_exceptions(translate)


@dataclass(frozen=True)
class AzureSettings:
    """The provider's fleet.yaml mapping."""

    subscription_id: str
    resource_group: str
    resource_groups: tuple[str, ...]
    base_url: str | None
    retry_total: int

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> AzureSettings:
        rg = str(config["resource_group"])
        extra = tuple(str(g) for g in config.get("list_resource_groups", ()))
        return cls(
            subscription_id=str(config["subscription_id"]),
            resource_group=rg,
            resource_groups=tuple(dict.fromkeys((rg, *extra))),
            base_url=config.get("base_url"),
            retry_total=int(config.get("retry_total", 3)),
        )


def vm_body(request: ProvisionRequest, nic_id: str) -> dict[str, Any]:
    """The VirtualMachine PUT body for a launch (pure). Options: image, admin_username,
    ssh_public_key, os_disk_size_gb, max_price (spot), identity_id (user-assigned managed identity). Source: ARM virtualMachines REST."""
    opts: Mapping[str, Any] = request.options
    location, zone = split_zone(request.zone)
    image = opts.get("image", DEFAULT_IMAGE)
    image_ref = {"id": image} if isinstance(image, str) else dict(image)
    user = str(opts.get("admin_username", "navarch"))
    os_profile: dict[str, Any] = {
        "computerName": request.node,
        "adminUsername": user,
        "customData": base64.b64encode(request.user_data.encode()).decode(),
        "linuxConfiguration": {"disablePasswordAuthentication": True},
    }
    if opts.get("ssh_public_key"):
        os_profile["linuxConfiguration"]["ssh"] = {
            "publicKeys": [
                {
                    "path": f"/home/{user}/.ssh/authorized_keys",
                    "keyData": str(opts["ssh_public_key"]),
                }
            ]
        }
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": request.instance_type},
        "storageProfile": {
            "imageReference": image_ref,
            "osDisk": {
                "name": f"{request.node}-osdisk",
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "diskSizeGB": int(opts.get("os_disk_size_gb", 200)),
            },
        },
        "osProfile": os_profile,
        "networkProfile": {
            "networkInterfaces": [
                {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
            ]
        },
    }
    if request.spot:
        props.update(
            priority="Spot",
            evictionPolicy="Delete",
            billingProfile={"maxPrice": float(opts.get("max_price", -1))},
        )
    body: dict[str, Any] = {"location": location, "tags": dict(request.tags), "properties": props}
    if opts.get("identity_id"):  # the agent writes its reports to Blob with this identity
        body["identity"] = {
            "type": "UserAssigned",
            "userAssignedIdentities": {str(opts["identity_id"]): {}},
        }
    if zone:
        body["zones"] = [zone]
    return body


class _StaticToken(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Bearer token for a local fake (plain http, which azure-core's policy refuses)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def on_request(self, request: Any) -> None:
        request.http_request.headers["Authorization"] = f"Bearer {self.token}"


def _text(value: Any) -> str:
    """The SDK's str-enums (VirtualMachineSizeTypes, ...) and plain strings -> str."""
    return str(getattr(value, "value", value) or "")


def _parse_id(resource_id: str) -> tuple[str, str]:
    """ARM id -> (resource group, name)."""
    parts = resource_id.strip("/").split("/")
    lower = [p.lower() for p in parts]
    return parts[lower.index("resourcegroups") + 1], parts[-1]


#: Power states that mean the VM no longer runs though navarch never stopped it (navarch
#: restarts and deletes VMs, never stops or deallocates them).
_DOWN_POWER_STATES = ("PowerState/stopped", "PowerState/deallocated")


def assigned_host(view: Any) -> str | None:
    """The dedicated host a VM runs on, from its instance view's assignedHost ("Resource id
    of the dedicated host, on which the virtual machine is allocated through automatic
    placement", azure-mgmt-compute VirtualMachineInstanceView); None elsewhere: ARM
    exposes no physical host name for other VMs (it is read inside the VM, Hyper-V KVP)."""
    host = getattr(view, "assigned_host", None) if view is not None else None
    return str(host) if host else None


def cloud_status_of(view: Any) -> CloudStatus:
    """Azure's own view of one VM from its instance view (None: not asked, unknown).

    impaired when vmHealth is HealthState/unhealthy (Application Health extension) or the
    power state is stopped or deallocated (detail names it; since: the status's time);
    ok when running and not unhealthy; unknown otherwise (starting, no view). event:
    system-maintenance when maintenanceRedeployStatus names a maintenance window, its
    start as the deadline. Source: Azure docs "States and billing status of Azure
    Virtual Machines", "Application Health extension", "Handling planned maintenance
    notifications" (maintenanceRedeployStatus).
    """
    if view is None:
        return CloudStatus()
    statuses = [(str(st.code or ""), getattr(st, "time", None)) for st in view.statuses or ()]
    power = next(((c, t) for c, t in statuses if c.startswith("PowerState/")), ("", None))
    health = getattr(getattr(getattr(view, "vm_health", None), "status", None), "code", None)
    failed: list[str] = []
    since = None
    if health == "HealthState/unhealthy":
        failed.append("VM health unhealthy")
    if power[0] in _DOWN_POWER_STATES:
        failed.append(power[0])
        since = power[1].astimezone(UTC) if power[1] else None
    if failed:
        state = InstanceHealth.IMPAIRED
    else:
        state = InstanceHealth.OK if power[0] == "PowerState/running" else InstanceHealth.UNKNOWN
    mrs = getattr(view, "maintenance_redeploy_status", None)
    start = mrs and (mrs.maintenance_window_start_time or mrs.pre_maintenance_window_start_time)
    return CloudStatus(
        state,
        "; ".join(failed),
        since=since,
        event=CloudEvent.SYSTEM_MAINTENANCE if start else None,
        event_deadline=start.astimezone(UTC) if start else None,
    )


class AzureProvider:
    """navarch Provider over Azure VMs (see the module docstring)."""

    #: What this provider can do (ARM tags PATCH, restart, the instance view and its maintenance window).
    capabilities: ClassVar[Capability] = (
        Capability.UPDATE_TAGS
        | Capability.REBOOT
        | Capability.INSTANCE_STATUS
        | Capability.MAINTENANCE_NOTICES
        | Capability.ADOPT
        | Capability.PREFLIGHT
    )
    #: The permission reading capacity reservation groups needs; without it they are
    #: unknown, with a warning (navarch.inventory.reservations_of; Azure RBAC actions).
    reservations_permission: ClassVar[str] = "Microsoft.Compute/capacityReservationGroups/read"

    def __init__(self, name: str, settings: AzureSettings, *, fleet: str) -> None:
        self.name = name
        self.settings = settings
        self.fleet = fleet
        self._compute: Any = None
        self._network: Any = None
        #: (resource group, proximity placement group) known to exist: checked once.
        self._ppgs: set[tuple[str, str]] = set()
        self._ppg_lock = threading.Lock()

    def _client_kwargs(self) -> tuple[Any, dict[str, Any]]:
        kwargs: dict[str, Any] = {"retry_total": self.settings.retry_total, "polling_interval": 1}
        token = os.environ.get(TOKEN_ENV)
        if self.settings.base_url:
            kwargs["base_url"] = self.settings.base_url
        if self.settings.base_url and token:
            kwargs.update(
                authentication_policy=_StaticToken(token),
                retry_backoff_factor=0.01,
                polling_interval=0,
            )
            return object(), kwargs
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential(), kwargs

    @property
    def compute(self) -> Any:
        if self._compute is None:
            from azure.mgmt.compute import ComputeManagementClient

            cred, kwargs = self._client_kwargs()
            self._compute = ComputeManagementClient(cred, self.settings.subscription_id, **kwargs)
        return self._compute

    @property
    def network(self) -> Any:
        if self._network is None:
            from azure.mgmt.network import NetworkManagementClient

            cred, kwargs = self._client_kwargs()
            self._network = NetworkManagementClient(cred, self.settings.subscription_id, **kwargs)
        return self._network

    def preflight(self, needs: Sequence[LaunchNeeds]) -> Sequence[Finding]:
        """What the pools' launches need, checked by reads (navarch.providers.
        azure_preflight): a read the role denies is a skipped finding naming the action,
        other failures are warnings. Never raises a cloud error."""
        return preflight_findings(self.name, lambda: self.compute, needs)

    def _instance(self, vm: Any) -> Instance:
        zones = list(vm.zones or [])
        zone = f"{vm.location}-{zones[0]}" if zones else str(vm.location)
        created = getattr(vm, "time_created", None) or datetime.now(UTC)
        return Instance(
            provider=self.name,
            instance_id=str(vm.id),
            zone=zone,
            instance_type=_text(vm.hardware_profile.vm_size),
            state=_STATES.get(_text(vm.provisioning_state), InstanceState.RUNNING),
            launched_at=created.astimezone(UTC),
            tags=tuple(sorted((vm.tags or {}).items())),
            spot=_text(vm.priority) == "Spot",
            cloud_status=cloud_status_of(getattr(vm, "instance_view", None)),
            host_id=assigned_host(getattr(vm, "instance_view", None)),
        )

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Every VM of the configured resource groups (foreign ones included), each with
        its CloudStatus: one paged list per resource group, instance views included."""
        out: list[Instance] = []
        with azure_errors(what="listing VMs"):
            for rg in self.settings.resource_groups:
                out.extend(
                    self._instance(vm)
                    for vm in self.compute.virtual_machines.list(rg, expand="instanceView")
                )
        return sorted(out, key=lambda i: i.instance_id)

    def provision(self, request: ProvisionRequest) -> Instance:
        """PUT the NIC, then the VM, both named after the node (idempotent by name).
        Raises CapacityError, QuotaError, AuthError, TransientError (map_error).

        ARM reports an allocation failure either at once (the PUT answers 409) or after
        the fact: the PUT answers 201 and the long-running operation ends Failed with
        AllocationFailed, leaving the VM in provisioningState Failed (ARM "Track
        asynchronous Azure operations"). The SDK's poller raises the operation's error,
        mapped the same way. On a capacity or quota error the failed VM (if any) and the
        NIC just made are deleted, VM first (a NIC still attached cannot be), so the node
        can launch in the next zone (ARM refuses to move an existing VM's zones). A VM of
        this launch left Failed by a killed run is launched again, not returned. A VM
        refused for capacity in a proximity placement group means the group has no room:
        the pool's placement_fallback decides (navarch.providers.placement_fallback)."""
        rg = self.settings.resource_group
        subnet = request.options.get("subnet_id")
        if not subnet:
            raise ConfigError(
                "an azure pool needs a subnet for its NICs",
                key_path=f"pools.{request.pool}.azure.subnet_id",
                hint="set azure: {subnet_id: /subscriptions/.../subnets/NAME}",
            )
        location, _ = split_zone(request.zone)
        what = f"launching {request.node} in {request.zone}"
        with azure_errors(zone=request.zone, what=what):
            if not request.known_absent:
                existing = self._get(rg, request.node)
                if (
                    existing is not None
                    and existing.tag(TAG_LAUNCH) == request.launch_id
                    and existing.state is not InstanceState.STOPPED
                ):
                    return existing
        placement = AzurePlacement.from_mapping(request.options, pool=request.pool)
        group = placement.proximity_placement_group
        return launch_with_fallback(
            lambda: self._launch(request, placement, str(subnet)),
            lambda: self._launch(
                request, replace(placement, proximity_placement_group=None), str(subnet)
            ),
            group=f"proximity placement group {group}" if group else "",
            fallback=placement.placement_fallback,
            where=f"{request.instance_type} in {request.zone}",
            log=log,
        )

    def _launch(
        self, request: ProvisionRequest, placement: AzurePlacement, subnet: str
    ) -> Instance:
        """PUT the NIC and the VM with placement -> the VM. On a capacity or quota error
        (also a proximity placement group with no room: AllocationFailed or
        OverconstrainedAllocationRequest) what the launch left is deleted first
        (_discard_launch), then the mapped error is raised."""
        rg = self.settings.resource_group
        location, _ = split_zone(request.zone)
        what = f"launching {request.node} in {request.zone}"
        with azure_errors(zone=request.zone, what=what):
            nic = self.network.network_interfaces.begin_create_or_update(
                rg,
                f"{request.node}-nic",
                {
                    "location": location,
                    "tags": dict(request.tags),
                    "ip_configurations": [{"name": "ipconfig1", "subnet": {"id": subnet}}],
                },
            ).result()
            if placement.proximity_placement_group:
                self._ensure_ppg(rg, location, placement.proximity_placement_group)
            body = placed_vm_body(
                vm_body(request, str(nic.id)), placement, self.settings.subscription_id, rg
            )
            try:
                vm = self.compute.virtual_machines.begin_create_or_update(
                    rg, request.node, body
                ).result()
            except HttpResponseError as exc:
                mapped = map_error(exc, zone=request.zone, what=what)
                if isinstance(mapped, (CapacityError, QuotaError)):
                    self._discard_launch(rg, request.node)
                raise
        return self._instance(vm)

    def _ensure_ppg(self, rg: str, location: str, name: str) -> None:
        """Create the proximity placement group `name` (a Standard group in location)
        unless it exists; once per provider. A group named by ARM id, or made by someone
        else, is used as it is. Call inside azure_errors."""
        if name.startswith("/subscriptions/"):
            return
        with self._ppg_lock:  # one check per group, not one per launch running at once
            if (rg, name) in self._ppgs:
                return
            groups = self.compute.proximity_placement_groups
            try:
                groups.get(rg, name)
            except ResourceNotFoundError:
                groups.create_or_update(rg, name, ppg_body(location, self.fleet))
            self._ppgs.add((rg, name))

    def _discard_launch(self, rg: str, node: str) -> None:
        """Delete what a refused launch left: the VM (absent after a synchronous refusal,
        Failed after an asynchronous one), then its NIC. Missing resources are fine."""
        for begin_delete, resource in (
            (self.compute.virtual_machines.begin_delete, node),
            (self.network.network_interfaces.begin_delete, f"{node}-nic"),
        ):
            try:
                begin_delete(rg, resource).result()
            except HttpResponseError as exc:
                if exc.status_code != 404:
                    raise

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]:
        """The capacity reservation groups the pools draw on, by the names they give
        (azure_placement.read_reservation_groups); no call when none is named. Raises
        the mapped errors."""
        with azure_errors(what="reading capacity reservation groups"):
            return read_reservation_groups(
                self.compute, self.settings.resource_group, ids, self.name
            )

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Delete each VM, then its NIC and OS disk; anything already gone is success."""
        ensure_owned(instances, self.fleet, "terminate")
        for inst in instances:
            rg, name = _parse_id(inst.instance_id)
            with azure_errors(what=f"terminating {name}"):
                steps = (
                    (self.compute.virtual_machines.begin_delete, name),
                    (self.network.network_interfaces.begin_delete, f"{name}-nic"),
                    (self.compute.disks.begin_delete, f"{name}-osdisk"),
                )
                for begin_delete, resource in steps:
                    try:
                        begin_delete(rg, resource).result()
                    except HttpResponseError as exc:
                        if exc.status_code != 404:
                            raise

    def reboot(self, instances: Sequence[Instance]) -> None:
        """virtualMachines/restart for each VM (same VM, new boot)."""
        ensure_owned(instances, self.fleet, "reboot")
        for inst in instances:
            rg, name = _parse_id(inst.instance_id)
            with azure_errors(what=f"rebooting {name}"):
                self.compute.virtual_machines.begin_restart(rg, name).result()

    def list_unmanaged(self, match: AdoptFilter) -> Sequence[Instance]:
        """The VMs of the configured resource groups without a navarch-fleet tag that
        `match` selects (its names against the VM name), sorted by id. Raises the mapped
        errors."""
        listed = self.list_instances(self.fleet)
        return [i for i in listed if match.matches(i, _parse_id(i.instance_id)[1])]

    def adopt(self, instance: Instance, tags: Mapping[str, str]) -> Instance:
        """PATCH the VM's tags with navarch's ownership tags merged into its own (a tags
        update: the VM keeps running). Refuses an owned VM (ensure_unowned)."""
        ensure_unowned(instance, tags)
        rg, name = _parse_id(instance.instance_id)
        merged = {**dict(instance.tags), **dict(tags)}
        with azure_errors(what=f"adopting {name}"):
            self.compute.virtual_machines.begin_update(rg, name, {"tags": merged}).result()
        return replace(instance, tags=tuple(sorted(merged.items())))

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """PATCH the VM's tags (merged with its current ones)."""
        ensure_owned([instance], self.fleet, "tag")
        ensure_no_ownership_tags(instance, tags)
        rg, name = _parse_id(instance.instance_id)
        merged = {**dict(instance.tags), **dict(tags)}
        with azure_errors(what=f"tagging {name}"):
            self.compute.virtual_machines.begin_update(rg, name, {"tags": merged}).result()

    def _get(self, rg: str, name: str) -> Instance | None:
        try:
            return self._instance(self.compute.virtual_machines.get(rg, name))
        except HttpResponseError as exc:
            if exc.status_code == 404:
                return None
            raise


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> AzureProvider:
    """Build the azure provider from its fleet.yaml mapping (schemas/providers/azure.schema.json)."""
    return AzureProvider(name, AzureSettings.from_mapping(config), fleet=fleet)
