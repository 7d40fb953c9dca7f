"""A navarch provider for bare-metal GPU machines listed in an inventory file.

fleet.yaml:

    providers:
      rack:
        type: baremetal
        inventory: inventory.yaml     # relative to fleet.yaml
    pools:
      train:
        provider: rack
        zones: [rack-1]
        instance_types: [8xh100]

inventory.yaml lists the machines navarch may hand out:

    machines:
      - {host: gpu-01, zone: rack-1, instance_type: 8xh100, address: 10.0.0.11}

"Provisioning" claims a free machine of the asked zone and type, "terminating" releases it.
Claims live in `<inventory>.claims.json` next to the inventory, keyed by host, holding the
navarch tags of the claim; the file is rewritten atomically (temp file + rename). navarch
runs one apply per fleet at a time (its store lease) but runs up to `max_parallel` actions
of that apply at once on threads, so every read-modify-write of the claims holds a lock
(a threading lock, plus flock on `<inventory>.claims.lock` for other processes).
A machine outside the inventory's claims is never touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from navarch.errors import CapacityError, ConfigError, ProviderError
from navarch.inventory import TAG_LAUNCH, Instance, InstanceState
from navarch.providers.base import ProvisionRequest, ensure_owned

__all__ = ["BareMetalProvider", "create"]


class BareMetalProvider:
    """navarch Provider over an inventory file of machines (see the module docstring)."""

    def __init__(self, name: str, inventory: Path, fleet: str) -> None:
        self.name = name
        self.fleet = fleet
        self.inventory = inventory
        self.claims_path = inventory.with_name(inventory.name + ".claims.json")
        self._lock = threading.Lock()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the claims lock (threads of this run and other processes)."""
        lock_path = self.inventory.with_name(self.inventory.name + ".claims.lock")
        with self._lock, open(lock_path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- files ---------------------------------------------------------------------------
    def machines(self) -> list[dict[str, Any]]:
        """The inventory's machines (host, zone, instance_type, address?)."""
        try:
            doc = yaml.safe_load(self.inventory.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the inventory: {exc}", file=str(self.inventory),
                              hint="write machines: [{host, zone, instance_type}, ...]") from exc
        machines = doc.get("machines")
        if not isinstance(machines, list) or not all(
            isinstance(m, dict) and {"host", "zone", "instance_type"} <= m.keys() for m in machines
        ):
            raise ConfigError("machines must be a list of {host, zone, instance_type}",
                              file=str(self.inventory), key_path="machines")
        return machines

    def claims(self) -> dict[str, dict[str, Any]]:
        """{host: {"tags": {...}, "launched_at": RFC 3339}} of the claimed machines."""
        if not self.claims_path.exists():
            return {}
        claims: dict[str, dict[str, Any]] = json.loads(self.claims_path.read_text())
        return claims

    def write_claims(self, claims: Mapping[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.claims_path.parent, prefix=".claims-")
        with os.fdopen(fd, "w") as fh:
            json.dump(claims, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.claims_path)

    def _instance(self, machine: Mapping[str, Any], claim: Mapping[str, Any]) -> Instance:
        return Instance(
            provider=self.name,
            instance_id=str(machine["host"]),
            zone=str(machine["zone"]),
            instance_type=str(machine["instance_type"]),
            state=InstanceState.RUNNING,
            launched_at=datetime.fromisoformat(claim["launched_at"]),
            tags=tuple(sorted(claim["tags"].items())),
            address=machine.get("address"),
        )

    # -- the Provider contract -------------------------------------------------------------
    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Every claimed machine (claims of other fleets included: navarch sees them as
        foreign and leaves them alone)."""
        claims = self.claims()
        return [self._instance(m, claims[m["host"]]) for m in self.machines()
                if m["host"] in claims]

    def provision(self, request: ProvisionRequest) -> Instance:
        """Claim a free machine of request.zone/instance_type, idempotent on launch_id: a
        machine already claimed under this launch id is returned again. Raises
        CapacityError (scope zone) when every such machine is claimed."""
        with self.locked():
            return self._provision(request)

    def _provision(self, request: ProvisionRequest) -> Instance:
        claims = self.claims()
        machines = self.machines()
        for m in machines:
            claim = claims.get(m["host"])
            if claim and claim["tags"].get(TAG_LAUNCH) == request.launch_id:
                return self._instance(m, claim)
        for m in machines:
            if (m["zone"], m["instance_type"]) == (request.zone, request.instance_type) \
                    and m["host"] not in claims:
                claims[m["host"]] = {"tags": dict(request.tags),
                                     "launched_at": datetime.now(UTC).isoformat()}
                self.write_claims(claims)
                return self._instance(m, claims[m["host"]])
        raise CapacityError(
            f"every {request.instance_type} machine in {request.zone} is claimed",
            code="NoFreeMachine", scope="zone",
        )

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Release the claims; a machine not claimed any more is success."""
        ensure_owned(instances, self.fleet, "terminate")
        with self.locked():
            claims = self.claims()
            for inst in instances:
                claims.pop(inst.instance_id, None)
            self.write_claims(claims)

    def reboot(self, instances: Sequence[Instance]) -> None:
        """Bare metal here has no BMC wired in: refuse rather than pretend."""
        raise ProviderError("the baremetal example provider cannot reboot machines",
                            code="Unsupported")

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """Merge tags into the machine's claim."""
        ensure_owned([instance], self.fleet, "tag")
        with self.locked():
            claims = self.claims()
            if instance.instance_id not in claims:
                raise ProviderError(f"{instance.instance_id} is not claimed", code="NotFound")
            claims[instance.instance_id]["tags"].update(tags)
            self.write_claims(claims)


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> BareMetalProvider:
    """navarch.providers entry point: {type: baremetal, inventory: PATH} -> the provider.
    Raises ConfigError naming providers.<name>.inventory when it is missing."""
    inventory = config.get("inventory")
    if not isinstance(inventory, str) or not inventory:
        raise ConfigError("baremetal needs an inventory file", key_path=f"providers.{name}.inventory",
                          hint="set inventory: PATH (relative to fleet.yaml)")
    path = Path(inventory)
    return BareMetalProvider(name, path if path.is_absolute() else base_dir / path, fleet)
