"""The embedded local provider: simulated machines under a directory, no cloud account.

Layout: <dir>/machines/<instance_id>/
  machine.json   id, zone, type, state, launched_at, tags, boot_id, spot, [host_id,
                 topology] (a simulated rack and host: navarch.providers.local.racks),
                 [impaired: {detail, since}] (the cloud's own status, `local inject --impaired`)
  faults.json    fault injection for the fake GPU backend (format: navarch.agent fake GPUs)
  kern.log       kernel log text the agent reads (XIDs are injected as real NVRM lines)
  agent.json     the agent's own state file (sequence, latched faults)
  silent         present when the agent is silenced (it writes no report)

Machines carry the same ownership tags cloud instances do (navarch-fleet, navarch-pool,
navarch-node, navarch-launch). The instance id is derived from the launch id, so a launch
repeated with the same launch id finds the machine it made (like an EC2 ClientToken).
Places listed in the provider's `unavailable` setting answer with a capacity error, and
places in `not_offered` with a placement error (the type is not offered in that zone), so
fallback can be seen offline. Hosts reported faulty (a node replaced for a hardware
fault) are recorded in <dir>/faulty_hosts.json, as a cloud's repair queue would take them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import orjson

from navarch.capabilities import Capability
from navarch.errors import CapacityError, ConfigError, PlacementError, ProviderError
from navarch.inventory import (
    NO_CLOUD_STATUS,
    TAG_FLEET,
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
from navarch.providers.local.racks import HostBook
from navarch.providers.local.reservations import local_reservations
from navarch.providers.preflight import Check, Finding, LaunchNeeds, Verdict

#: What a GPU reset cures on a fake GPU (reset_gpus): a GPU fallen off the bus comes back,
#: volatile ECC counts and readings start afresh. Injected GPU processes and utilisation are
#: the workload's, not the GPU's, and stay.
_RESET_CLEARS = frozenset({"gpu_lost", "ecc_uncorrected", "temperature_c"})


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


class LocalProvider:
    """Provider over simulated machines in a directory (see module docstring)."""

    #: What this provider can do (the machine file's tags, reboot, fake-GPU reset and injected impairment).
    capabilities: ClassVar[Capability] = (
        Capability.UPDATE_TAGS
        | Capability.REBOOT
        | Capability.RESET_GPU
        | Capability.INSTANCE_STATUS
        | Capability.PLACE_BY_HOST
        | Capability.REPORT_FAULTY_HOST
        | Capability.ADOPT
        | Capability.PREFLIGHT
    )

    def __init__(
        self,
        name: str,
        root: Path,
        unavailable: Sequence[str] = (),
        not_offered: Sequence[str] = (),
        *,
        fleet: str | None = None,
        reservations: Mapping[str, Mapping[str, Any]] | None = None,
        zones: Sequence[str] = (),
    ) -> None:
        self.name = name
        #: the zones this simulated cloud has (empty: any zone is accepted)
        self.zones = tuple(zones)
        #: simulated reservations, NAME -> {zone, instance_type, count} (list_reservations)
        self.reservations = dict(reservations or {})
        self.root = Path(root)
        # The fleet whose machines this is (create() gives it; the directory is per fleet).
        self.fleet = fleet if fleet is not None else self.root.name
        self.unavailable = frozenset(unavailable)
        self.not_offered = frozenset(not_offered)
        # Hosts taken by machines (filled by a listing or the first launch; executor threads
        # share it).
        self._hosts: HostBook | None = None
        self._hosts_lock = threading.Lock()

    # -- machine files ---------------------------------------------------------------
    @property
    def machines_dir(self) -> Path:
        return self.root / "machines"

    def machine_dir(self, instance_id: str) -> Path:
        return self.machines_dir / instance_id

    def read_machine(self, instance_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(
            (self.machine_dir(instance_id) / "machine.json").read_text()
        )
        return doc

    def write_machine(self, machine: Mapping[str, Any]) -> None:
        write_json_atomic(self.machine_dir(machine["instance_id"]) / "machine.json", dict(machine))

    def machines(self) -> list[dict[str, Any]]:
        """Every machine's record (sorted by instance id); unreadable ones are skipped."""
        out: list[dict[str, Any]] = []
        top = str(self.machines_dir)  # one Path, not one per machine
        if not os.path.isdir(top):
            return out
        # Sorted by name (string compares, not Path objects: 100,000 machines in 0.1 s).
        for name in sorted(os.listdir(top)):
            try:
                with open(os.path.join(top, name, "machine.json"), "rb") as fh:
                    out.append(orjson.loads(fh.read()))  # every run reads them all
            except (OSError, ValueError):
                continue  # being created or removed right now
        return out

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]:
        """Every simulated reservation with its use, whatever ids the pools name
        (navarch.providers.local.reservations)."""
        del ids  # local pools name no reservation: all of them are reported
        if not self.reservations:
            return []  # nothing simulated: no need to read every machine again
        return local_reservations(self.name, self.reservations, self.machines())

    def find(self, node: str) -> dict[str, Any]:
        """The machine whose navarch-node tag (or instance id) is `node`; ConfigError if none."""
        for m in self.machines():
            if m["tags"].get("navarch-node") == node or m["instance_id"] == node:
                return m
        raise ConfigError(f"no local machine named {node!r}", hint="see `navarch status FLEET`")

    @staticmethod
    def _instance(provider: str, m: Mapping[str, Any]) -> Instance:
        return Instance(
            provider=provider,
            instance_id=m["instance_id"],
            zone=m["zone"],
            instance_type=m["instance_type"],
            state=InstanceState(m["state"]),
            launched_at=datetime.fromisoformat(m["launched_at"]),
            tags=tuple(sorted(m["tags"].items())),
            spot=m.get("spot", False),
            address="127.0.0.1",
            host_id=m.get("host_id"),  # a simulated host, or one set by hand
            cloud_status=_cloud_status(m),
            topology=tuple(m.get("topology") or ()),
        )

    # -- Provider contract -------------------------------------------------------------
    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Every machine in the directory: this fleet's, and any others as foreign. The
        first listing also books the hosts they take, as the first launch would (a run
        lists, then launches: else its first launch reads every machine file again)."""
        machines = self.machines()
        with self._hosts_lock:
            if self._hosts is None:
                self._hosts = self._host_book(machines)
        return tuple(self._instance(self.name, m) for m in machines)

    def _host_book(self, machines: Sequence[Mapping[str, Any]]) -> HostBook:
        """The hosts in use: those of `machines` and those in the repair queue."""
        taken = {m["host_id"] for m in machines if m.get("host_id")}
        # A host in the repair queue takes no machine, as a cloud's would not.
        return HostBook(taken | self._faulty_hosts())

    def provision(self, request: ProvisionRequest) -> Instance:
        """Create the machine (idempotent on request.launch_id) on a simulated host: in
        the rack request.block names, never on a host of request.avoid_hosts (racks.HostBook.take,
        over the run's hosts).

        Raises CapacityError (scope zone) for a place listed in `unavailable`,
        PlacementError (scope zone) for one listed in `not_offered`.
        """
        instance_id = "i-" + hashlib.sha256(request.launch_id.encode()).hexdigest()[:17]
        if (self.machine_dir(instance_id) / "machine.json").exists():
            return self._instance(self.name, self.read_machine(instance_id))
        if f"{request.zone}/{request.instance_type}" in self.not_offered:
            raise PlacementError(
                f"instance type {request.instance_type} is not offered in {request.zone} "
                "(simulated)",
                code="Unsupported",
                scope="zone",
            )
        if f"{request.zone}/{request.instance_type}" in self.unavailable:
            raise CapacityError(
                f"no capacity for {request.instance_type} in {request.zone} (simulated)",
                code="InsufficientInstanceCapacity",
                scope="zone",
            )
        with self._hosts_lock:
            if self._hosts is None:  # read once per provider or listing: a run launches many
                self._hosts = self._host_book(self.machines())
            host_id, topology = self._hosts.take(
                request.zone, request.launch_id, request.avoid_hosts, request.block
            )
        machine = {
            "host_id": host_id,
            "topology": list(topology),
            "instance_id": instance_id,
            "zone": request.zone,
            "instance_type": request.instance_type,
            "state": InstanceState.RUNNING.value,
            "launched_at": datetime.now(UTC).isoformat(),
            "tags": dict(request.tags),
            "spot": request.spot,
            "boot_id": str(uuid.uuid4()),
        }
        self.write_machine(machine)
        return self._instance(self.name, machine)

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Remove the machines; one already gone is success. Refuses (ProviderError, code
        ForeignInstance, before removing any) instances without navarch-fleet=<this fleet>,
        as the cloud providers do (safety rule 1, providers.base.ensure_owned)."""
        ensure_owned(instances, self.fleet, "terminate")
        for inst in instances:
            shutil.rmtree(self.machine_dir(inst.instance_id), ignore_errors=True)
            with self._hosts_lock:
                if self._hosts is not None and inst.host_id:
                    self._hosts.discard(inst.host_id)

    def reboot(self, instances: Sequence[Instance]) -> None:
        """What a reboot does to a machine: a new boot id, an empty kernel log, injected
        faults cleared; same instance id, tags and launch time.

        Refuses (ProviderError, before touching any) a machine without a navarch-fleet tag
        (safety rule 1); a machine that is gone is ProviderError (code NotFound).
        """
        machines = [self._owned_machine(inst.instance_id, "reboot") for inst in instances]
        for m in machines:
            self.write_machine({**m, "boot_id": str(uuid.uuid4())})
            d = self.machine_dir(m["instance_id"])
            for name in ("kern.log", "faults.json"):
                (d / name).unlink(missing_ok=True)

    def reset_gpus(self, instance: Instance) -> str:
        """What `nvidia-smi -r` and playbooks/reset_gpu.yaml do to a local machine:
        the fake GPUs' device faults (lost GPUs, uncorrectable ECC counts, temperatures) are
        cleared and the agent is told of the reset (its gpu-reset marker), so it drops the
        XIDs it latched this boot; the boot id, kernel log position, instance and tags stay.

        Refused like nvidia-smi refuses it: ProviderError (code GpuBusy) while an injected
        GPU process remains, and nothing is changed. A machine that is gone or carries no
        navarch-fleet tag is ProviderError as in reboot. Returns one line for the audit log.
        """
        m = self._owned_machine(instance.instance_id, "reset")
        d = self.machine_dir(instance.instance_id)
        faults = self._faults(instance.instance_id)
        busy = sum(int(n) for n in (faults.get("process_count") or {}).values())
        if busy:
            raise ProviderError(
                f"GPU reset refused: {busy} GPU process(es) remain on {instance.instance_id}",
                code="GpuBusy",
            )
        kept = {k: v for k, v in faults.items() if k not in _RESET_CLEARS}
        write_json_atomic(d / "faults.json", kept)
        (d / "gpu-reset").write_text(f"{m['boot_id']}\n")
        cleared = sorted(k for k in faults if k in _RESET_CLEARS)
        return f"GPUs of {instance.instance_id} reset (boot {m['boot_id']} kept" + (
            f"; cleared {', '.join(cleared)})" if cleared else ")"
        )

    def diagnose(self, instance: Instance, level: int) -> tuple[str, str]:
        """What `dcgmi diag -r level` says of a local machine's fake GPUs, at once
        (no detached run): fail when a device fault is injected (a lost GPU, uncorrectable
        ECC errors: DCGM's PCIe and memory tests, level 2 and up; a lost GPU fails level 1
        too), else pass. Returns (a DiagState value, one line); a machine that is gone is
        ("error", why)."""
        if not (self.machine_dir(instance.instance_id) / "machine.json").exists():
            return "error", f"no local machine {instance.instance_id}"
        faults = self._faults(instance.instance_id)
        failed = [f"pcie on GPU {g}" for g in faults.get("gpu_lost", [])]
        if level >= 2:
            failed += [
                f"memory on GPU {g}"
                for g, n in sorted((faults.get("ecc_uncorrected") or {}).items())
                if int(n) > 0
            ]
        if failed:
            return "fail", f"dcgmi diag -r {level} (fake GPUs): failed: " + "; ".join(failed)
        return "pass", f"dcgmi diag -r {level} (fake GPUs): passed"

    def _owned_machine(self, instance_id: str, verb: str) -> dict[str, Any]:
        """The machine's record; ProviderError NotFound when it is gone, ForeignInstance
        when it carries no navarch-fleet tag (safety rule 1), before anything is changed."""
        try:
            m = self.read_machine(instance_id)
        except (OSError, ValueError) as exc:
            raise ProviderError(
                f"no local machine {instance_id} to {verb}", code="NotFound"
            ) from exc
        if TAG_FLEET not in m["tags"]:
            raise ProviderError(
                f"refusing to {verb} {instance_id}: no {TAG_FLEET} tag", code="ForeignInstance"
            )
        return m

    def _faults(self, instance_id: str) -> dict[str, Any]:
        """The machine's injected faults (faults.json), {} when none or unreadable."""
        try:
            faults = json.loads((self.machine_dir(instance_id) / "faults.json").read_text())
        except (OSError, ValueError):
            return {}
        return faults if isinstance(faults, dict) else {}

    @property
    def faulty_hosts_path(self) -> Path:
        return self.root / "faulty_hosts.json"

    def _faulty_hosts(self) -> set[str]:
        """The hosts reported faulty so far (faulty_hosts.json; none when unreadable)."""
        try:
            reports = json.loads(self.faulty_hosts_path.read_text())
        except (OSError, ValueError):
            return set()
        if not isinstance(reports, list):
            return set()
        return {str(r["host"]) for r in reports if isinstance(r, dict) and r.get("host")}

    def report_faulty_host(self, instance: Instance, fault: str) -> str:
        """Record the machine's host as faulty in faulty_hosts.json ({host, instance_id,
        fault, at} per report, oldest first), as a cloud's repair queue takes it. Refuses
        an instance of another fleet (ensure_owned) and one without a host (ProviderError
        NoHost). Returns one line for the audit log."""
        ensure_owned([instance], self.fleet, "report")
        if not instance.host_id:
            raise ProviderError(f"{instance.instance_id} has no known host", code="NoHost")
        try:
            reports = json.loads(self.faulty_hosts_path.read_text())
        except (OSError, ValueError):
            reports = []
        reports.append(
            {
                "host": instance.host_id,
                "instance_id": instance.instance_id,
                "fault": fault,
                "at": datetime.now(UTC).isoformat(),
            }
        )
        write_json_atomic(self.faulty_hosts_path, reports)
        return f"host {instance.host_id} reported faulty ({fault}) to the local provider"

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """Set tags on the machine in place (its machine.json, written atomically); refuses
        an instance of another fleet or none (ensure_owned)."""
        ensure_owned([instance], self.fleet, "tag")
        ensure_no_ownership_tags(instance, tags)
        try:
            machine = self.read_machine(instance.instance_id)
        except FileNotFoundError:
            return  # already gone
        self.write_machine({**machine, "tags": {**machine["tags"], **dict(tags)}})

    def list_unmanaged(self, match: AdoptFilter) -> Sequence[Instance]:
        """The running machines without a navarch-fleet tag that `match` selects (names
        against the instance id), sorted by id."""
        found = (self._instance(self.name, m) for m in self.machines())
        return tuple(i for i in found if match.matches(i, i.instance_id))

    def adopt(self, instance: Instance, tags: Mapping[str, str]) -> Instance:
        """Write the ownership tags into the machine's file in place: the same boot id,
        launch time and state (nothing restarts). Refuses an owned machine
        (ensure_unowned); ProviderError (code NotFound) for one that is gone."""
        ensure_unowned(instance, tags)
        try:
            machine = self.read_machine(instance.instance_id)
        except FileNotFoundError as exc:
            raise ProviderError(f"{instance.instance_id} is gone", code="NotFound") from exc
        if machine["tags"].get(TAG_FLEET):
            raise ProviderError(
                f"refusing to adopt {instance.instance_id}: tagged {TAG_FLEET} meanwhile",
                code="OwnedInstance",
            )
        updated = {**machine, "tags": {**machine["tags"], **dict(tags)}}
        self.write_machine(updated)
        return self._instance(self.name, updated)

    def preflight(self, needs: Sequence[LaunchNeeds]) -> Sequence[Finding]:
        """The local cloud's launch needs: each zone is one of `zones` when set (validate
        refuses the others already; a fleet.yaml changed since is caught here). Places in
        `not_offered` are left to fail at launch: they simulate a cloud's answer there, to
        see fallback offline."""
        return [
            Finding(
                Check.ZONE,
                Verdict.GAP,
                self.name,
                f"pool {need.pool}: zone {zone}",
                "no such zone on the local provider",
                f"use one of {', '.join(self.zones)}",
                f"{need.key_prefix or 'pools.' + need.pool}.zones",
            )
            for need in needs
            for zone in need.zones
            if self.zones and zone not in self.zones
        ]

    # -- local-only operations (CLI `navarch local ...`) -------------------------------------
    def launch_foreign(self, zone: str, instance_type: str) -> Instance:
        """A machine without navarch's tags, as someone else's VM in the same account."""
        m = {
            "instance_id": "i-foreign" + uuid.uuid4().hex[:10],
            "zone": zone,
            "instance_type": instance_type,
            "state": "running",
            "launched_at": datetime.now(UTC).isoformat(),
            "tags": {"owner": "someone-else"},
            "spot": False,
            "boot_id": str(uuid.uuid4()),
        }
        self.write_machine(m)
        return self._instance(self.name, m)

    def fleet_machines(self, fleet: str) -> list[dict[str, Any]]:
        return [m for m in self.machines() if m["tags"].get(TAG_FLEET) == fleet]

    def set_impaired(self, node: str, detail: str | None, now: datetime) -> None:
        """Make the cloud list the machine named `node` impaired (detail: what the cloud
        says), or healthy again (detail None). ConfigError if there is no such machine."""
        m = dict(self.find(node))
        if detail is None:
            m.pop("impaired", None)
        else:
            m["impaired"] = {"detail": detail, "since": now.isoformat()}
        self.write_machine(m)

    def reboot_node(self, node: str) -> None:
        """Reboot the machine named `node` (see reboot); ConfigError if there is none."""
        self.reboot([self._instance(self.name, self.find(node))])


_RUNNING_OK = CloudStatus(InstanceHealth.OK)


def _cloud_status(m: Mapping[str, Any]) -> CloudStatus:
    """The cloud's view of a local machine: impaired when injected, ok while running."""
    impaired = m.get("impaired")
    if impaired:
        return CloudStatus(
            InstanceHealth.IMPAIRED,
            str(impaired.get("detail", "")),
            since=datetime.fromisoformat(impaired["since"]),
        )
    return _RUNNING_OK if m.get("state") == InstanceState.RUNNING.value else NO_CLOUD_STATUS


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> LocalProvider:
    """Build the local provider from its fleet.yaml mapping ({type: local, dir, unavailable,
    not_offered, reservations})."""
    root = Path(config.get("dir", ".navarch/local"))
    if not root.is_absolute():
        root = base_dir / root
    return LocalProvider(
        name,
        root / fleet,
        config.get("unavailable", ()),
        config.get("not_offered", ()),
        fleet=fleet,
        reservations=config.get("reservations"),
        zones=config.get("zones", ()),
    )
