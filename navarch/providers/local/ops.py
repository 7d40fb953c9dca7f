"""The local provider's tools (its own folder beside the provider): fire agents, inject faults.

These are what `navarch local tick|inject|reboot|launch-foreign` run. Each local machine
runs the real agent code (navarch.agent.run_once) on the fake GPU backend; faults reach it
the way real ones reach a real agent: a fake-GPU faults file for device readings, and real
NVRM kernel-log lines for XIDs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from navarch.errors import ConfigError
from navarch.fleet.spec import FleetSpec
from navarch.providers.local import LocalProvider, write_json_atomic
from navarch.providers.local.acceptance import (
    ACCEPTANCE_FILE,
    parse_answers,
    write_answers,
)
from navarch.providers.local.acceptance import pool_acceptance as _pool_acceptance
from navarch.providers.local.faults import append_kernel_line, deliver, injectable
from navarch.report import signing
from navarch.stores.base import Blob, ObjectInfo, ObjectStore
from navarch.stores.file import FileStore
from navarch.textsafe import counted


def local_providers(spec: FleetSpec) -> list[LocalProvider]:
    """The fleet's local providers (ConfigError when it has none)."""
    from navarch.providers.local import create

    out = [
        create(name, cfg, base_dir=spec.base_dir, fleet=spec.name)
        for name, cfg in sorted(spec.providers.items())
        if cfg["type"] == "local"
    ]
    if not out:
        raise ConfigError(
            "this fleet has no local provider",
            file=str(spec.source),
            key_path="providers",
            hint="`navarch local` works on type: local only",
        )
    return out


def _find(spec: FleetSpec, node: str) -> tuple[LocalProvider, dict[str, Any]]:
    for provider in local_providers(spec):
        try:
            return provider, provider.find(node)
        except ConfigError:
            continue
    raise ConfigError(
        f"no local machine named {node!r} in fleet {spec.name}",
        hint="`navarch status FLEET` lists the nodes",
    )


def _gpu_count(spec: FleetSpec, pool_name: str, d: Path, *, remember: bool = True) -> int | None:
    """The machine's GPU count: its pool's gpus_per_node, remembered in the machine
    directory the way a real node keeps the agent configuration it booted with, so the
    machine still has its GPUs (and its agent still reports) once the pool has left
    fleet.yaml. None for a machine of a removed pool never ticked while declared.
    remember=False reads only (an injection that may be refused writes nothing)."""
    path = d / "gpu_count"
    try:
        count = spec.pool(pool_name).gpus_per_node
    except KeyError:
        return int(path.read_text()) if path.is_file() else None
    if remember and not path.is_file():
        path.write_text(str(count))
    return count


@dataclass(frozen=True)
class TickResult:
    node: str
    status: str  # the report's status, or "silent" / "error: ..."


def tick(
    spec: FleetSpec, now: datetime | None = None, agent_clock_skew_s: float = 0.0
) -> list[TickResult]:
    """Run every local node's agent once, as its systemd timer would.

    Each agent decides for itself whether its report is due (a change, or its heartbeat
    since its last write, judged on `now`), so a tick leaves an unchanged report alone.
    now: the tick's clock (aware UTC; default the system clock). On the file store each
    report written is stamped with it (_StoreAtTick): the local provider's simulated store
    time, so a run on the same replayed clock judges the report's age as production judges
    a real store's (the store's own time). agent_clock_skew_s: the agents' clocks run this
    far ahead of it (negative: behind), a node clock that is wrong. Returns one TickResult
    per machine of the fleet (sorted by node name). A silenced node writes nothing. Raises
    ConfigError when the fleet secret cannot be read.
    """
    from navarch.agent import AgentConfig, run_once
    from navarch.fleet.secret import read_fleet_secret
    from navarch.stores import open_store

    secret = read_fleet_secret(spec)
    now = now or datetime.now(UTC)
    store = _StoreAtTick(open_store(spec.store_url, base_dir=spec.base_dir), now)
    results = []
    for provider in local_providers(spec):
        for m in sorted(
            provider.fleet_machines(spec.name), key=lambda m: m["tags"]["navarch-node"]
        ):
            node = m["tags"]["navarch-node"]
            pool_name = m["tags"]["navarch-pool"]
            d = provider.machine_dir(m["instance_id"])
            if (d / "silent").exists():
                results.append(TickResult(node, "silent"))
                continue
            gpus = _gpu_count(spec, pool_name, d)
            if gpus is None:
                results.append(TickResult(node, f"error: pool {pool_name} not in fleet.yaml"))
                continue
            config = AgentConfig(
                fleet=spec.name,
                pool=pool_name,
                node=node,
                instance_id=m["instance_id"],
                store=spec.store_url,
                key=signing.derive_node_key(secret, spec.name, node).hex(),
                gpus_per_node=gpus,
                state_file=str(d / "agent.json"),
                kernel_log=str(d / "kern.log"),
                fake_gpu=True,
                gpu_count=gpus,
                faults_file=str(d / "faults.json"),
                boot_id=m["boot_id"],
                metadata="none",
                notice_file=str(d / "notice.json"),
                acceptance=_pool_acceptance(spec, pool_name),
                acceptance_file=str(d / ACCEPTANCE_FILE),
            )
            report = run_once(config, now=now + timedelta(seconds=agent_clock_skew_s), store=store)
            results.append(TickResult(node, report["status"]))
    return results


class _StoreAtTick:
    """The fleet's store as one tick's agents write to it: an object the agent writes is
    stamped with the tick's clock, the store time a real store would give the write.

    Only a write is stamped. An agent that finds its report not due (unchanged and short
    of its heartbeat) writes nothing, and its report keeps the time and version of its
    last write, as on a real store: stamping it anyway makes a new version of the same
    signed bytes, which the reconciler must and does reject as a replay
    (navarch.reconcile.reports). Stores other than the file store keep their own times.
    """

    def __init__(self, store: ObjectStore, now: datetime) -> None:
        self._store = store
        self._now = now
        self.url = store.url
        self.parallel_gets = store.parallel_gets

    def get(self, key: str) -> Blob:
        return self._store.get(key)

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        version = self._store.put(key, data, if_absent=if_absent, if_version=if_version)
        if isinstance(self._store, FileStore):
            return self._store.set_modified_at(key, self._now)
        return version

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        self._store.delete(key, if_version=if_version)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        return self._store.list(prefix)

    def get_many(self, keys: Iterable[str]) -> dict[str, Blob]:
        return self._store.get_many(keys)

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        return self._store.presigned_get_url(key, expires_s)


def _faults(d: Path) -> dict[str, Any]:
    try:
        faults: dict[str, Any] = json.loads((d / "faults.json").read_text())
        return faults
    except (OSError, ValueError):
        return {}


def _gpu_bdf(node: str, gpu_count: int, gpu: int) -> str:
    from navarch.agent.gpu import FakeGpuBackend

    gpus = FakeGpuBackend(node, gpu_count).probe().gpus
    if not 0 <= gpu < len(gpus):
        raise ConfigError(f"node {node} has GPUs 0..{len(gpus) - 1}, not {gpu}")
    return gpus[gpu].pci_bus_id


def _check_injection(
    node: str,
    gpus: int,
    *,
    gpu: int,
    temperature_c: float | None,
    ecc_uncorrected: int | None,
    utilization_pct: float | None,
    processes: int | None,
) -> None:
    """Raise ConfigError naming the flag when a value is outside what a GPU can report
    (index within the node's GPUs; NVML temperatures 0-200 C, utilisation 0-100 %)."""
    checks = (
        ("--gpu", gpu, 0 <= gpu < gpus, f"{node} has {counted(gpus, 'GPU')}: 0 to {gpus - 1}"),
        (
            "--temperature",
            temperature_c,
            temperature_c is None or 0 <= temperature_c <= 200,
            "0 to 200 (Celsius)",
        ),
        ("--ecc", ecc_uncorrected, ecc_uncorrected is None or ecc_uncorrected >= 0, "0 or more"),
        (
            "--utilization",
            utilization_pct,
            utilization_pct is None or 0 <= utilization_pct <= 100,
            "0 to 100 (percent)",
        ),
        ("--processes", processes, processes is None or processes >= 0, "0 or more"),
    )
    for flag, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(
                f"{flag} {value} is out of range", key_path=flag, hint=f"use {allowed}"
            )


def inject(
    spec: FleetSpec,
    node: str,
    *,
    xid: int | None = None,
    gpu: int = 0,
    gpu_lost: bool = False,
    temperature_c: float | None = None,
    ecc_uncorrected: int | None = None,
    utilization_pct: float | None = None,
    processes: int | None = None,
    silent: bool | None = None,
    preempt: bool = False,
    impaired: bool = False,
    clear: bool = False,
    acceptance: Sequence[str] = (),
    fault: str | None = None,
    kernel_lines: Sequence[str] = (),
) -> list[str]:
    """Inject faults into one local node; returns what was done, one line each.

    xid: appends a real NVRM Xid line for GPU `gpu` to the node's kernel log (the agent
    parses it like on a real machine). gpu_lost / temperature_c / ecc_uncorrected /
    utilization_pct / processes: written to the fake-GPU faults file for GPU `gpu`
    (utilization_pct for every GPU). silent: the agent stops (True) or resumes (False)
    writing reports. preempt: a spot preemption notice. impaired: the cloud lists the
    instance impaired (its own status check failed), as a dead host looks to the cloud;
    combine with silent for a host whose agent died with it. clear: remove every fault and
    the impairment. acceptance: KEY=VALUE answers of the node's acceptance tools
    (navarch.providers.local.acceptance), taking effect on its next acceptance. fault: a
    fault class or representative kind (navarch.providers.local.faults.INJECTABLE): its
    kernel line, or its finding for GPU `gpu` in the faults file. kernel_lines: appended
    verbatim to the node's kernel log, one line each. Raises ConfigError for an unknown
    fault or a kernel line holding a line break.
    """
    provider, m = _find(spec, node)
    row = injectable(fault) if fault is not None else None
    _check_kernel_lines(kernel_lines)
    answers = parse_answers(acceptance)
    d = provider.machine_dir(m["instance_id"])
    gpus = _known_gpu_count(spec, node, m, d)
    _check_injection(
        node,
        gpus,
        gpu=gpu,
        temperature_c=temperature_c,
        ecc_uncorrected=ecc_uncorrected,
        utilization_pct=utilization_pct,
        processes=processes,
    )
    done: list[str] = []
    faults = {} if clear else _faults(d)
    if clear:
        done.append(_clear_faults(provider, node, m, d))
    if xid is not None:
        done.append(_append_xid(node, m, d, gpus, gpu, xid))
    done += _set_gpu_faults(
        faults,
        gpu,
        gpu_lost=gpu_lost,
        temperature_c=temperature_c,
        ecc_uncorrected=ecc_uncorrected,
        utilization_pct=utilization_pct,
        processes=processes,
    )
    if row is not None:
        done.append(deliver(row, d / "kern.log", faults, gpu))
    done += [append_kernel_line(d / "kern.log", line) for line in kernel_lines]
    if faults or not clear:
        write_json_atomic(d / "faults.json", faults)
    done += _signal_agent(d, silent=silent, preempt=preempt)
    if impaired:
        done.append(_impair(provider, node))
    if answers:
        done.append(write_answers(d / ACCEPTANCE_FILE, answers))
    return done


def _impair(provider: LocalProvider, node: str) -> str:
    """Have the cloud list the node's instance impaired, as its failed status check shows."""
    provider.set_impaired(node, "instance status check failed (injected)", datetime.now(UTC))
    return "the cloud lists the instance impaired"


def _known_gpu_count(spec: FleetSpec, node: str, m: dict[str, Any], d: Path) -> int:
    """The machine's GPU count; a ConfigError when neither fleet.yaml nor the machine knows it."""
    pool_name = m["tags"]["navarch-pool"]
    gpus = _gpu_count(spec, pool_name, d, remember=False)
    if gpus is None:
        raise ConfigError(
            f"{node}: its pool {pool_name} is not in fleet.yaml and the machine never ran "
            "its agent while it was, so its GPU count is unknown",
            hint="`navarch local tick` the fleet before removing a pool",
        )
    return gpus


def _clear_faults(provider: LocalProvider, node: str, m: dict[str, Any], d: Path) -> str:
    """Remove the kernel log, faults, silence and notice files, and any impairment."""
    for name in ("kern.log", "faults.json", "silent", "notice.json", ACCEPTANCE_FILE):
        (d / name).unlink(missing_ok=True)
    if "impaired" in m:
        provider.set_impaired(node, None, datetime.now(UTC))
    return "cleared every fault"


def _append_xid(node: str, m: dict[str, Any], d: Path, gpus: int, gpu: int, xid: int) -> str:
    """Append an NVRM Xid line for GPU gpu to the machine's kernel log, stamped with its
    uptime as dmesg does."""
    from navarch.report.xid import lookup

    bdf = _gpu_bdf(node, gpus, gpu)
    uptime_s = (datetime.now(UTC) - datetime.fromisoformat(m["launched_at"])).total_seconds()
    line = (
        f"[{uptime_s:.6f}] NVRM: Xid (PCI:{bdf}): {xid}, pid='<unknown>', "
        f"name=<unknown>, {lookup(xid).meaning}\n"
    )
    with open(d / "kern.log", "a") as fh:
        fh.write(line)
    return f"kernel log: {line.strip()}"


def _check_kernel_lines(lines: Sequence[str]) -> None:
    """A kernel line is one line: ConfigError (key --kernel-line) for an empty one or one
    holding a line break."""
    for line in lines:
        if not line.strip() or "\n" in line or "\r" in line:
            raise ConfigError(
                f"--kernel-line {line!r} is not one line of text",
                key_path="--kernel-line",
                hint="pass each kernel log line as its own --kernel-line",
            )


def _set_gpu_faults(
    faults: dict[str, Any],
    gpu: int,
    *,
    gpu_lost: bool,
    temperature_c: float | None,
    ecc_uncorrected: int | None,
    utilization_pct: float | None,
    processes: int | None,
) -> list[str]:
    """Set the fake-GPU faults asked for in faults (in place); what was set, one line each."""
    done: list[str] = []
    key = str(gpu)
    if gpu_lost:
        faults["gpu_lost"] = sorted(set(faults.get("gpu_lost", [])) | {gpu})
        done.append(f"GPU {gpu} lost")
    if temperature_c is not None:
        faults.setdefault("temperature_c", {})[key] = temperature_c
        done.append(f"GPU {gpu} temperature {temperature_c:g} C")
    if ecc_uncorrected is not None:
        faults.setdefault("ecc_uncorrected", {})[key] = ecc_uncorrected
        done.append(f"GPU {gpu} {ecc_uncorrected} uncorrectable ECC errors")
    if utilization_pct is not None:
        faults["utilization_pct"] = utilization_pct
        done.append(f"GPU utilisation {utilization_pct:g}% on every GPU")
    if processes is not None:
        faults.setdefault("process_count", {})[key] = processes
        done.append(f"GPU {gpu} runs {processes} process(es)")
    return done


def _signal_agent(d: Path, *, silent: bool | None, preempt: bool) -> list[str]:
    """Silence or resume the machine's agent, and leave it a spot preemption notice."""
    done: list[str] = []
    if silent is True:
        (d / "silent").touch()
        done.append("agent silenced")
    elif silent is False:
        (d / "silent").unlink(missing_ok=True)
        done.append("agent resumed")
    if preempt:
        write_json_atomic(
            d / "notice.json",
            {"kind": "preemption", "source": "local", "deadline": None, "detail": "injected"},
        )
        done.append("spot preemption notice")
    return done


def reboot(spec: FleetSpec, node: str) -> None:
    """Reboot a local node: new boot id, kernel log and faults cleared."""
    provider, _ = _find(spec, node)
    provider.reboot_node(node)


def launch_foreign(spec: FleetSpec, zone: str, instance_type: str) -> str:
    """Start a machine without navarch's tags (as another team's VM); returns its id."""
    return local_providers(spec)[0].launch_foreign(zone, instance_type).instance_id


__all__ = ["tick", "inject", "reboot", "launch_foreign", "local_providers", "TickResult"]
