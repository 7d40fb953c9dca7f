"""Dead on arrival and acceptance in the simulator: latent faults, the tools' time, the figures.

A machine that arrives (new, surge, replacement, spare) carries a latent fault with the
scenario's ``doa_rate`` (world key; default 0), drawn from its own seeded stream. A latent
fault is one the passive checks do not see; it shows only to the pool's acceptance suite,
which the shipped agent runs (navarch.agent.acceptance) over FakeToolHost with the fault as
its overrides (the keys ``navarch local inject --acceptance`` takes):

  nccl_half     all_reduce_perf bus bandwidth half the healthy 480 GB/s (a slow GPU or link)
  pcie_x8       GPU 0's PCIe link trained at x8 of x16
  driver_drift  a driver other than the pool's (570.133.20 -> 550.54.15): the image's, never
                drawn for one arrival (ARRIVAL_FAULTS)
  dcgm_diag     dcgmi diag fails (a GPU that fails NVIDIA's own diagnostics)

A GPU missing (7 of 8) is not among them: the agent's passive gpu_count check
(navarch.agent.checks.gpu_count_check) already sees it on every run.

Time: each tool call spends simulated seconds (TOOL_SECONDS, from docs/acceptance.md's
per-test times); the agent's tick budget (acceptance.TICK_BUDGET_S) is spent on that clock,
so the suite spans ticks as on a real node, and a tick's report reaches the store when
its tools are done (navarch.simulate.world delays the write and the next check).

Sources: no operator publishes the share of new GPU nodes that fail acceptance (Crusoe,
Together AI, CoreWeave and Lambda describe the gate, not its rate); ACCEPTANCE_DOA_RATE is
an assumption, stated in docs/simulate.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from navarch.agent.acceptance import ToolBench
from navarch.agent.acceptance_tools import FakeToolHost
from navarch.agent.acceptance_tools.host import ToolOutput
from navarch.planner.model import READY, Acceptance, ActionKind, ActionReason
from navarch.simulate.report import percentile

#: latent fault -> the FakeToolHost overrides that show it (navarch.agent.acceptance_tools.fake)
LATENT_FAULTS: Mapping[str, Mapping[str, str]] = {
    "dcgm_diag": {"dcgm_diag": "fail"},
    "driver_drift": {"driver": "550.54.15"},
    "nccl_half": {"nccl_busbw_gbps": "240.06"},
    "pcie_x8": {"pcie_width": "8"},
}

#: The share of arrivals with a latent fault in examples/simulate/acceptance-*.yaml: an
#: assumption (no published rate; the reference suggests 1-5 % of nodes with a finding).
ACCEPTANCE_DOA_RATE = 0.03

#: Simulated seconds per tool call, from docs/acceptance.md's "time" column: nvidia-smi
#: about 1 s; dcgmi diag level 1 "seconds" (30 s assumed), level 2 about 2 min, level 3
#: about 15 min (DCGM's help text); nvbandwidth "seconds per testcase" (10 s assumed,
#: 30 s for the deep suite's 10 samples); all_reduce_perf "under a minute" (60 s, 90 s
#: deep with 100 iterations); sysfs reads take no time.
DCGM_DIAG_S = {1: 30.0, 2: 120.0, 3: 900.0}
NVBANDWIDTH_S = {"3": 10.0, "10": 30.0}
NCCL_S = {"20": 60.0, "100": 90.0}
NVIDIA_SMI_S = 1.0


def tool_seconds(argv: Sequence[str]) -> float:
    """Simulated seconds one call of argv takes (see the constants above); an unknown
    program takes 1 s."""
    prog = argv[0] if argv else ""
    rest = list(argv[1:])

    def after(flag: str) -> str:
        return rest[rest.index(flag) + 1] if flag in rest[:-1] else ""

    if prog == "dcgmi":
        level = after("-r")
        return DCGM_DIAG_S.get(int(level) if level.isdigit() else 1, DCGM_DIAG_S[3])
    if prog == "nvbandwidth":
        return NVBANDWIDTH_S.get(after("-i"), NVBANDWIDTH_S["3"])
    if prog == "all_reduce_perf":
        return NCCL_S.get(after("-n"), NCCL_S["20"])
    return NVIDIA_SMI_S


class TimedToolHost:
    """FakeToolHost whose every tool call spends simulated time (tool_seconds) on its
    clock: ``spent_s`` since the last ``start()``."""

    def __init__(self, overrides: Mapping[str, str]) -> None:
        self.fake = FakeToolHost(dict(overrides))
        self.spent_s = 0.0

    def start(self) -> None:
        """A new agent tick: no tool time spent yet."""
        self.spent_s = 0.0

    def clock(self) -> float:
        """Seconds of tool time this tick (the agent's budget clock)."""
        return self.spent_s

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        """The fake tool's output after its time; a tool slower than timeout_s is killed
        at the timeout, as SystemToolHost kills it (exit -9, timed_out)."""
        took_s = tool_seconds(argv)
        if took_s > timeout_s:
            self.spent_s += timeout_s
            return ToolOutput(-9, timed_out=True)
        self.spent_s += took_s
        return self.fake.run(argv, timeout_s)

    def read_text(self, path: str) -> str:
        """A sysfs file of the fake node (no time)."""
        return self.fake.read_text(path)

    def list_dir(self, path: str) -> tuple[str, ...]:
        """A sysfs directory of the fake node (no time)."""
        return self.fake.list_dir(path)


def bench(latent: str | None) -> tuple[TimedToolHost, ToolBench]:
    """The tools of a node with this latent fault (None: a healthy node) and the agent's
    ToolBench over them."""
    overrides = dict(LATENT_FAULTS.get(latent or "", {}))
    host = TimedToolHost(overrides)
    return host, ToolBench(overrides, host, host.clock)


#: The latent faults one arriving machine may carry: its hardware. A driver other than the
#: pool's is the image's (every node launched from it shares it), which the planner holds
#: for a person (navarch.planner.acceptance: a finding about the image), so it is never one
#: machine's draw: drawn per arrival, it held one node in acceptance for good and kept the
#: spare set short.
ARRIVAL_FAULTS = ("dcgm_diag", "nccl_half", "pcie_x8")


def draw_latent(rng: random.Random, rate: float) -> str | None:
    """A latent fault for one arrival with probability rate, its kind uniform over
    ARRIVAL_FAULTS; two draws always, so a node's stream stays aligned whatever the rate."""
    hit, pick = rng.random(), rng.random()
    if hit >= rate:
        return None
    return ARRIVAL_FAULTS[min(int(pick * len(ARRIVAL_FAULTS)), len(ARRIVAL_FAULTS) - 1)]


def _pct(values: list[float], q: float) -> float | None:
    p = percentile(values, q)
    return None if p is None else round(p, 3)


def acceptance_keys(
    latent: Mapping[str, str],
    served_faulty: set[str],
    dead_on_arrival: set[str],
    acceptance_s: list[float],
) -> dict[str, Any]:
    """The result document's acceptance figures: arrivals with a latent fault, those that
    served with it (served_faulty_nodes), those acceptance replaced (dead_on_arrival, latent
    or not: a healthy node failing is counted too), and acceptance time p50/p95 (seconds from
    the agent's first check of a boot to the planner's verdict)."""
    return {
        "latent_faults": len(latent),
        "latent_faults_by_kind": dict(sorted(_count(latent.values()).items())),
        "served_faulty_nodes": len(served_faulty),
        "dead_on_arrival": len(dead_on_arrival),
        "dead_on_arrival_without_latent_fault": len(dead_on_arrival - set(latent)),
        "acceptance_runs": len(acceptance_s),
        "p50_acceptance_s": _pct(acceptance_s, 0.5),
        "p95_acceptance_s": _pct(acceptance_s, 0.95),
        "max_acceptance_s": round(max(acceptance_s), 3) if acceptance_s else None,
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


class AcceptanceTally:
    """What the engine counts of acceptance while the real reconcile run acts on the world.

    ready: the nodes the last executed run saw serving (Lifecycle in READY) or promoted;
    in a pool with an acceptance policy only those serve (a node that reported but whose
    acceptance the planner has not passed yet is kept from the scheduler). served_faulty:
    nodes that served with a latent fault; dead_on_arrival: nodes replaced by an acceptance
    verdict (ActionReason.ACCEPTANCE_FAILED or ACCEPTANCE_TIMEOUT); acceptance_s: per boot, from
    its first report to the planner's first verdict other than running.
    """

    def __init__(self, acceptance_pools: frozenset[str]) -> None:
        self.pools = acceptance_pools
        self.ready: frozenset[str] = frozenset()
        self.served_faulty: set[str] = set()
        self.dead_on_arrival: set[str] = set()
        self.acceptance_s: list[float] = []
        self._judged: set[tuple[str, int]] = set()
        self._ready_at: dict[str, float] = {}

    def after_run(self, world: Any, views: Sequence[Any], promoted: set[str]) -> None:
        """One executed run's views (navarch.planner.model.NodeView): who serves, and the
        acceptance runs judged for the first time on their boot."""
        self.ready = frozenset(v.node for v in views if v.lifecycle in READY) | promoted
        for node in self.ready:
            self._ready_at.setdefault(node, world.t)
        for v in views:
            if v.acceptance is None or v.acceptance is Acceptance.RUNNING:
                continue
            n = world.by_name.get(v.node)
            if n is None or n.first_report_s is None or (v.node, n.boot) in self._judged:
                continue
            self._judged.add((v.node, n.boot))
            self.acceptance_s.append(world.t - n.first_report_s)

    def serves(self, pool: str, node: str) -> bool:
        """Whether a node that looks serving to the world serves: in a pool with
        acceptance, only once a run saw it past acceptance."""
        return pool not in self.pools or node in self.ready

    def serving_since(self, pool: str, node: str, reported_s: float | None) -> float | None:
        """When a node began to serve: in a pool with acceptance, the first run that saw
        it past acceptance; elsewhere its first report (reported_s)."""
        if pool not in self.pools:
            return reported_s
        return self._ready_at.get(node)

    def on_action(self, kind: Any, node: str | None, replaces: str | None, reason: Any) -> None:
        """An executed action: one whose reason is an acceptance verdict counts its node (the
        replaced one) dead on arrival."""
        if reason not in (ActionReason.ACCEPTANCE_FAILED, ActionReason.ACCEPTANCE_TIMEOUT):
            return
        doa = replaces if kind is ActionKind.PROVISION else node
        if doa:
            self.dead_on_arrival.add(doa)

    def keys(self, nodes: Sequence[Any]) -> dict[str, Any]:
        """acceptance_keys over every node the world had (alive or terminated)."""
        latent = {n.node: n.latent for n in nodes if n.latent is not None}
        return acceptance_keys(latent, self.served_faulty, self.dead_on_arrival, self.acceptance_s)
