"""A simulated node's agent: the shipped agent run over a fake GPU and an in-memory host.

Each simulated machine runs ``navarch.agent.runner.run_once``, the code a real node's
systemd timer runs: its checks, XID latching, sequence numbers, state and HMAC signing,
writing to the simulated store. Only what a node would read from its hardware and disk
is simulated:

- the GPUs: ``navarch.agent.gpu.FakeGpuBackend`` with the node's injected device faults
  (a lost GPU, a GPU at its shutdown temperature, an NVLink link down);
- the node (``SimHost``, a ``navarch.agent.host.NodeHost``): the agent state in memory,
  a kernel log of NVRM lines in the kernel's own format (read as a text log is, source
  "file", so a report is byte for byte what an agent reading the same lines from a file
  writes), the GPU-reset marker, a spot notice, and no check plugins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from navarch.agent import kernel_log as kl
from navarch.agent.acceptance import ToolBench, runs_tests
from navarch.agent.checks import Check
from navarch.agent.config import AgentConfig
from navarch.agent.gpu import FakeFaults, FakeGpuBackend, GpuProbe
from navarch.agent.host import notice_from_doc
from navarch.agent.host_readings import HostReadings
from navarch.agent.network import PortReading
from navarch.agent.runner import run_once
from navarch.agent.state import AgentState
from navarch.report import xid
from navarch.simulate.acceptance import TimedToolHost, bench
from navarch.stores.base import Blob, ObjectStore

#: The path the simulated kernel log claims in the state's position block.
KERNEL_LOG_PATH = "/var/log/kern.log"


def xid_line(code: int, pci_bus_id: str, at: datetime) -> str:
    """One NVRM XID line as `dmesg --time-format iso` prints it (navarch.agent.kernel_log
    parses it as on a real node); the text after the code is the catalogue's meaning."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    return (
        f"kern  :warn  : {stamp} NVRM: Xid (PCI:{pci_bus_id}): {code}, "
        f"pid='<unknown>', name=<unknown>, {xid.lookup(code).meaning}"
    )


@dataclass
class SimHost:
    """A NodeHost in memory (see navarch.agent.host): what one simulated node's disk holds.

    kernel_log: the raw lines of this boot's kernel log, appended by the world; the agent
    reads those past its saved offset, as it reads a text kernel log.
    """

    boot_id: str
    state_path: str = "memory"
    state: AgentState | None = None
    kernel_log: list[str] = field(default_factory=list)
    reset_pending: bool = False
    notice: Mapping[str, Any] | None = None

    def load_state(self) -> tuple[AgentState, str | None]:
        """The state the last run saved ("missing" on the node's first run)."""
        if self.state is None:
            return AgentState(), "missing"
        return self.state, None

    def read_kernel_log(
        self, saved: Mapping[str, Any], boot_id: str, now: datetime
    ) -> tuple[list[kl.KernelLine], dict[str, Any], str, str | None]:
        """This boot's kernel lines past the saved offset (from the start after a reboot)."""
        same = saved.get("source") == "file" and saved.get("boot_id") == boot_id
        start = int(dict(saved.get("position") or {}).get("offset", 0)) if same else 0
        if start > len(self.kernel_log):
            start = 0
        lines = [kl.split_prefix(raw, now=now) for raw in self.kernel_log[start:]]
        block = {
            "source": "file",
            "path": KERNEL_LOG_PATH,
            "boot_id": boot_id,
            "position": {"offset": len(self.kernel_log)},
        }
        return lines, block, "file", None

    def read_host(self, now: datetime) -> HostReadings:
        """A simulated node has no sysfs or clock of its own: neither is read."""
        return HostReadings()

    def gpu_reset_pending(self) -> bool:
        """Whether the GPUs were reset since the last run."""
        return self.reset_pending

    def plugin_checks(
        self,
        config: AgentConfig,
        boot_id: str,
        gpus: Sequence[Mapping[str, Any]],
        checks: Sequence[Check],
    ) -> list[Check]:
        """No check plugins are installed on a simulated node."""
        return []

    def read_notice(self, now: datetime) -> dict[str, Any] | None:
        """The spot notice the world gave the node, as the agent reads a notice file."""
        return notice_from_doc(dict(self.notice)) if self.notice is not None else None

    def read_network(self) -> tuple[PortReading, ...] | None:
        """A simulated node has no RDMA ports to read."""
        return None

    def save_state(self, state: AgentState) -> None:
        """Keep the state for the next run (memory never fails to write)."""
        self.state = state

    def clear_gpu_reset(self) -> None:
        """Forget the reset once its run saved its state."""
        self.reset_pending = False


class NodeStore(Protocol):
    """What the agent asks of a store (navarch.agent.runner.run_once: the previous report's
    sequence, then the write): one node's view of the simulated store."""

    def get(self, key: str) -> Blob:
        """The object at key. Raises NotFound, StoreError."""
        ...

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        """Write data at key -> its new version. Raises StoreError."""
        ...


class _ProbeOnce:
    """A fake GPU backend probed once: its probe is a pure function of its faults, so every
    check of one fault state reads the same GpuProbe (frozen) without building it again."""

    def __init__(self, backend: FakeGpuBackend) -> None:
        self.name = backend.name
        self.faults = backend.faults  # read by the agent's injected_checks
        self._backend = backend
        self._probe: GpuProbe | None = None

    def probe(self) -> GpuProbe:
        """The backend's probe, built on the first call."""
        if self._probe is None:
            self._probe = self._backend.probe()
        return self._probe


class SimAgent:
    """The agent of one simulated node: its config, host and fake GPUs across boots.

    faults: the device faults the fake GPUs show now (a new backend per change: the fake
    backend's probe is a pure function of its faults).
    """

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.host = SimHost(boot_id=config.current_boot_id())
        self.faults = FakeFaults()
        self._backend = _ProbeOnce(
            FakeGpuBackend(config.node, config.fake_gpu_count(), self.faults)
        )
        self.last_report: dict[str, Any] | None = None
        self.tools: TimedToolHost | None = None
        self.bench: ToolBench | None = None
        self._read: tuple[Any, ...] | None = None  # what the last run read (see _inputs)

    def pci_bus_id(self, gpu: int) -> str:
        """The PCI address of GPU `gpu` as the fake backend (and so the kernel) names it."""
        return self._backend.probe().gpus[gpu].pci_bus_id

    def set_faults(self, faults: FakeFaults) -> None:
        """The device faults from now on."""
        if faults != self.faults:
            self.faults = faults
            self._backend = _ProbeOnce(
                FakeGpuBackend(self.config.node, self.config.fake_gpu_count(), faults)
            )

    def log_xid(self, code: int, gpu: int, at: datetime, count: int = 1) -> None:
        """The driver logs XID `code` on GPU `gpu` at `at`, `count` times (a burst)."""
        line = xid_line(code, self.pci_bus_id(gpu), at)
        self.host.kernel_log.extend([line] * count)

    def set_notice(self, notice: Mapping[str, Any] | None) -> None:
        """A notice document ({"kind", "source", "deadline", "detail"}) or None."""
        self.host.notice = notice

    def reboot(self, boot_id: str) -> None:
        """A new boot: a new boot id and an empty kernel log; the state file stays."""
        self.config = replace(self.config, boot_id=boot_id)
        self.host.boot_id = boot_id
        self.host.kernel_log = []
        self.host.reset_pending = False

    def reset_gpus(self) -> None:
        """playbooks/reset_gpu.yaml succeeded: the marker the next run reads."""
        self.host.reset_pending = True

    def run(self, now: datetime, store: ObjectStore | NodeStore) -> dict[str, Any]:
        """One agent check at `now` (the report it built, also kept as last_report; written
        to `store` when due). Raises StoreError when the write fails."""
        self.last_report = None
        if self.tools is not None:
            self.tools.start()
        self._read = None
        self.last_report = run_once(
            self.config,
            now=now,
            store=store,
            backend=self._backend,
            host=self.host,
            acceptance_bench=self.bench,
        )
        self._read = self._inputs()  # a check whose write failed leaves it None
        return self.last_report

    def _inputs(self) -> tuple[Any, ...]:
        """Everything a check reads from this machine: the boot, the GPUs' faults, the
        kernel log's length, the reset marker and the notice."""
        notice = dict(self.host.notice) if self.host.notice is not None else None
        return (
            self.config.boot_id,
            self.faults,
            len(self.host.kernel_log),
            self.host.reset_pending,
            notice,
        )

    def reads_as_last_run(self) -> bool:
        """Whether a check now would read what the last completed check read and run no
        acceptance tool (a running suite moves on with time: tools_settled)."""
        return self._read is not None and self.tools_settled() and self._read == self._inputs()

    def tools_settled(self) -> bool:
        """Whether the next check runs no acceptance tool: none on the machine, or the
        agent's state holds a finished run of this boot with no GPU reset pending, as the
        agent itself decides it (navarch.agent.acceptance.runs_tests)."""
        if self.tools is None:
            return True
        state = self.host.state
        return state is not None and not runs_tests(
            state.acceptance, self.config.current_boot_id(), self.host.reset_pending
        )

    def account_heartbeat(self, now: datetime) -> int:
        """A heartbeat at `now` that repeats the last report: the state records it as the
        agent's run_once would (the next sequence, the write's time, the same change digest)
        without building, signing or writing a report -> its sequence. The caller has
        checked reads_as_last_run and that the last report was written and is at rest."""
        state = self.host.state
        if state is None:
            raise ValueError("account_heartbeat before the agent's first run")
        sequence = state.sequence + 1
        written = {"at_s": now.timestamp(), "change": state.written.get("change")}
        self.host.state = replace(state, sequence=sequence, written=written)
        return sequence

    def set_latent(self, latent: str | None) -> None:
        """The acceptance tools of this machine, showing its latent fault (None: healthy;
        navarch.simulate.acceptance.LATENT_FAULTS); each tool call spends simulated time."""
        self.tools, self.bench = bench(latent)

    def tool_s(self) -> float:
        """Simulated seconds the last check spent in acceptance tools (0: none ran)."""
        return self.tools.spent_s if self.tools is not None else 0.0
