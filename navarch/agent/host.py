"""The node an agent run reads and writes besides its GPUs and the store: one seam.

``run_once`` does all of its node-local I/O through a ``NodeHost``:

- the state file (``load_state`` / ``save_state``, navarch.agent.state);
- the kernel log since the saved position (``read_kernel_log``: text file > journald >
  /dev/kmsg, navarch.agent.kernel_log);
- the host's PCIe AER counters and clock (``read_host``, navarch.agent.host_readings);
- the GPU-reset marker that playbooks/reset_gpu.yaml leaves (``gpu_reset_pending`` /
  ``clear_gpu_reset``);
- a spot or maintenance notice (``read_notice``: the notice file, then cloud metadata);
- the navarch.checks plugins installed on the node (``plugin_checks``);
- the RDMA ports in sysfs (``read_network``, navarch.agent.network).

``FileHost`` is the real machine, configured by agent.yaml. The simulator hands each
simulated node its own in-memory host (navarch.simulate.node), so a simulated report comes
out of the same ``run_once``: the same checks, latching, sequence and signing.

Python 3.9-compatible like the rest of the agent (it ships to GPU nodes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from navarch.agent import kernel_log as kl
from navarch.agent.checks import Check
from navarch.agent.config import AgentConfig
from navarch.agent.host_readings import (
    ClockReading,
    HostReadings,
    read_aer_counters,
    read_clock,
)
from navarch.agent.network import INFINIBAND, PortReading, read_ports
from navarch.agent.state import AgentState, load_state, save_state
from navarch.report.compat import UTC
from navarch.report.health_report import NoticeKind, NoticeSource, ReportNotice

__all__ = [
    "NodeHost",
    "FileHost",
    "notice_from_doc",
    "read_kernel_log",
    "gpu_reset_marker",
]

log = logging.getLogger("navarch.agent")


_NOTICE_KINDS = frozenset(k.value for k in NoticeKind)
_NOTICE_SOURCES = frozenset(s.value for s in NoticeSource)


class NodeHost(Protocol):
    """What one agent run needs from its node besides the GPU backend and the store.

    Every method is called at most once per run, in the order listed. None may raise but
    ``save_state`` (OSError: the run then reports the check ``agent_state``).
    """

    #: Where the state lives, for log lines and the ``agent_state`` check's evidence.
    state_path: str

    def load_state(self) -> tuple[AgentState, str | None]:
        """(state, problem): problem None when read, else "missing" / "corrupt: <why>"."""
        ...

    def read_kernel_log(
        self, saved: Mapping[str, Any], boot_id: str, now: datetime
    ) -> tuple[list[kl.KernelLine], dict[str, Any], str, str | None]:
        """New kernel lines since the saved position block (the state's ``kernel_log``):
        (lines, the position block to save, source name, why no source could be read)."""
        ...

    def read_host(self, now: datetime) -> HostReadings:
        """The host's PCIe AER totals and clock synchronisation (each None when not read)."""
        ...

    def gpu_reset_pending(self) -> bool:
        """True when the GPUs were reset since the last run (latched XIDs start afresh)."""
        ...

    def read_network(self) -> tuple[PortReading, ...] | None:
        """The node's RDMA ports (navarch.agent.network.read_ports), or None when the
        ports are not read (a simulated node)."""
        ...

    def plugin_checks(
        self,
        config: AgentConfig,
        boot_id: str,
        gpus: Sequence[Mapping[str, Any]],
        checks: Sequence[Check],
    ) -> list[Check]:
        """The checks of the node's navarch.checks plugins, after the built-in ones."""
        ...

    def read_notice(self, now: datetime) -> dict[str, Any] | None:
        """A preemption / maintenance notice as the report's ``notice`` object, or None."""
        ...

    def save_state(self, state: AgentState) -> None:
        """Save the state for the next run. Raises OSError when it cannot be written."""
        ...

    def clear_gpu_reset(self) -> None:
        """Forget a GPU reset once the state that dropped its latched XIDs is saved."""
        ...


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def notice_from_doc(doc: Any) -> dict[str, Any] | None:
    """A notice document ({"kind", "source", "deadline", "detail"}) as the report's
    ``notice`` object; None (logged) when it is not one. kind: preemption | maintenance;
    an unknown source reads as "local"; an unparsable deadline as None."""
    if not isinstance(doc, dict) or doc.get("kind") not in _NOTICE_KINDS:
        log.warning("notice_file_invalid", extra={"fields": {"error": "kind"}})
        return None
    deadline = doc.get("deadline")
    try:
        deadline = (
            _iso(datetime.fromisoformat(deadline.replace("Z", "+00:00")))
            if isinstance(deadline, str)
            else None
        )
    except ValueError:
        deadline = None
    return ReportNotice(
        NoticeKind(doc["kind"]),
        NoticeSource(doc["source"]) if doc.get("source") in _NOTICE_SOURCES else NoticeSource.LOCAL,
        deadline,
        str(doc.get("detail", ""))[:512],
    ).to_json()


def _notice_from_file(path: str | None) -> dict[str, Any] | None:
    """A notice written to a file (the local provider's notice.json); invalid -> None, logged."""
    if not path:
        return None
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("notice_file_invalid", extra={"fields": {"path": path, "error": str(exc)}})
        return None
    return notice_from_doc(doc)


def _boot_time(now: datetime) -> datetime | None:
    try:
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return now - timedelta(seconds=uptime)


def read_kernel_log(
    config: AgentConfig, saved: Mapping[str, Any], boot_id: str, now: datetime
) -> tuple[list[kl.KernelLine], dict[str, Any], str, str | None]:
    """New kernel lines since the saved position: (lines, new saved block, source, error).

    Source order: config.kernel_log (text file) > journald > /dev/kmsg. The fake backend
    without kernel_log reads no kernel log (a laptop's own log is not the simulated node's).
    """
    from navarch.agent.gpu import fake_requested

    def pos_for(source: str) -> dict[str, Any] | None:
        if saved.get("source") != source:
            return None
        if source == "kmsg" and saved.get("boot_id") != boot_id:
            return None  # kmsg sequence numbers restart at boot
        if source == "file" and saved.get("path") != config.kernel_log:
            return None
        return dict(saved.get("position") or {})

    if config.kernel_log:
        res = kl.read_text_file(config.kernel_log, pos_for("file"), now=now)
        return (
            list(res.lines),
            {
                "source": "file",
                "path": config.kernel_log,
                "boot_id": boot_id,
                "position": res.position,
            },
            "file",
            None,
        )
    if fake_requested(config.fake_gpu):
        return [], {"source": "none"}, "none", None
    errors: list[str] = []
    if kl.journal_available():
        try:
            pos = pos_for("journal") or {}
            res = kl.read_journal(pos.get("cursor"))
            return (
                list(res.lines),
                {"source": "journal", "boot_id": boot_id, "position": res.position},
                "journal",
                None,
            )
        except OSError as exc:
            errors.append(str(exc))
    try:
        pos = pos_for("kmsg") or {}
        res = kl.read_kmsg(pos.get("kmsg_seq"), boot_time=_boot_time(now))
        return (
            list(res.lines),
            {"source": "kmsg", "boot_id": boot_id, "position": res.position},
            "kmsg",
            None,
        )
    except OSError as exc:
        errors.append(f"/dev/kmsg: {exc}")
    return [], dict(saved), "none", "; ".join(errors) or "no kernel log source"


#: Where AER counters are read when agent.yaml names no sysfs_root.
DEFAULT_SYSFS_ROOT = "/sys"


def read_host_readings(config: AgentConfig) -> HostReadings:
    """AER totals under config.sysfs_root (default DEFAULT_SYSFS_ROOT; the fake backend reads none unless
    sysfs_root is set) and the clock by adjtimex (not read on the fake backend: the
    machine's own clock is not the simulated node's). A sysfs that cannot be listed is
    reported in ``aer_error``, never raised."""
    from navarch.agent.gpu import fake_requested

    fake = fake_requested(config.fake_gpu)
    root = config.sysfs_root or (None if fake else DEFAULT_SYSFS_ROOT)
    aer, error = None, None
    if root is not None:
        try:
            aer = read_aer_counters(root)
        except OSError as exc:
            error = f"{root}: {exc.strerror or exc}"
    clock = ClockReading(None, detail="fake backend", read=False) if fake else read_clock()
    return HostReadings(aer, error, clock)


def gpu_reset_marker(config: AgentConfig) -> Path:
    """The file playbooks/reset_gpu.yaml writes after `nvidia-smi -r` succeeded:
    `gpu-reset` beside the agent's state file. While it exists the next run starts its
    latched XIDs afresh (a reset, like a reboot, ends the faults it cured; one that is still
    there shows again in the device readings or the kernel log); the run that read it
    removes it once its state is saved."""
    return Path(config.state_file).parent / "gpu-reset"


class FileHost:
    """The real machine: the state file, kernel log sources, reset marker and notice file
    named by agent.yaml, cloud metadata, and the installed navarch.checks plugins."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state_path = config.state_file

    def load_state(self) -> tuple[AgentState, str | None]:
        """navarch.agent.state.load_state of the configured state file."""
        return load_state(self.config.state_file)

    def read_kernel_log(
        self, saved: Mapping[str, Any], boot_id: str, now: datetime
    ) -> tuple[list[kl.KernelLine], dict[str, Any], str, str | None]:
        """See the module function read_kernel_log."""
        return read_kernel_log(self.config, saved, boot_id, now)

    def read_host(self, now: datetime) -> HostReadings:
        """See the module function read_host_readings."""
        return read_host_readings(self.config)

    def gpu_reset_pending(self) -> bool:
        """Whether the reset marker (gpu_reset_marker) exists."""
        return gpu_reset_marker(self.config).exists()

    def plugin_checks(
        self,
        config: AgentConfig,
        boot_id: str,
        gpus: Sequence[Mapping[str, Any]],
        checks: Sequence[Check],
    ) -> list[Check]:
        """Every installed navarch.checks plugin (navarch.agent.plugin_checks)."""
        from navarch.agent.plugin_checks import context_for, plugin_checks

        return plugin_checks(
            context_for(config, boot_id, gpus, checks), config.plugin_check_timeout_s
        )

    def read_notice(self, now: datetime) -> dict[str, Any] | None:
        """A preemption / maintenance notice: the notice file first, then cloud metadata."""
        config = self.config
        notice = _notice_from_file(config.notice_file)
        if notice is not None or config.metadata == "none":
            return notice
        from navarch.agent.notices import fetch_notice

        found, errors = fetch_notice(
            config.metadata,
            endpoint=config.metadata_endpoint,
            timeout_s=config.metadata_timeout_s,
            now=now,
            names=tuple(n for n in (config.node, config.instance_id) if n),
        )
        for err in errors:
            log.info("metadata_unreachable", extra={"fields": {"error": err}})
        return found.to_json() if found else None

    def read_network(self) -> tuple[PortReading, ...] | None:
        """The ports under config.infiniband_dir, else /sys/class/infiniband; None under
        the fake backend without infiniband_dir (the laptop's ports are not the node's)."""
        from navarch.agent.gpu import fake_requested

        if self.config.infiniband_dir:
            return read_ports(self.config.infiniband_dir)
        if fake_requested(self.config.fake_gpu):
            return None
        return read_ports(INFINIBAND)

    def save_state(self, state: AgentState) -> None:
        """navarch.agent.state.save_state (atomic). Raises OSError."""
        save_state(self.config.state_file, state)

    def clear_gpu_reset(self) -> None:
        """Remove the reset marker."""
        gpu_reset_marker(self.config).unlink(missing_ok=True)
