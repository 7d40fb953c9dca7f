"""Acceptance on the node: run the pool's acceptance suite once per boot (and again after a
GPU reset) and keep the run in the agent's state, so every report of the boot carries it.

The suite is two kinds of test:

- inventory tests, read from the GPU probe the agent makes anyway (``inventory_results``):
  GPU count and memory per GPU against the pool's spec, PCIe link width at its maximum,
  NVLink links active, ECC mode and persistence mode on, and the driver version (the
  planner compares versions with the pool's baseline: one decider for drift). A reading
  the backend does not give is not tested (never a pass by default);
- tool tests (dcgmi diag, nvbandwidth, NCCL all_reduce_perf, ...), an injectable list of
  ``(test name, ToolTest)``: navarch.agent.acceptance_tools's registry bound to the
  node's programs and sysfs (SystemToolHost) on a real node, and to FakeToolHost on the
  fake GPU backend, which prints the real tools' output formats from the overrides file
  (``AgentConfig.acceptance_file``, written by ``navarch local inject --acceptance``), so
  the same parsers judge a local node. A test the inventory already answered is not
  run again, except ``versions``: the inventory reads only the driver, and the tool's
  reading (CUDA, VBIOS, InfoROM, NIC firmware too) takes its place.

Time: the suite runs inside the agent's timer tick, after the health checks, resumable:
each tick runs the tests still missing until ``TICK_BUDGET_S`` has been spent (each tool
bounded by the policy's ``timeout_s``), saves what it has, and the next tick goes on. So a
tick is late by at most the budget plus one tool's timeout, the health checks still run
every tick (the report says ``finished_at: null`` meanwhile), and there is no second
process to supervise or to outlive the tick (the systemd unit is a oneshot; a detached
child would escape its timeouts and its accounting).

A test that raises becomes ``unknown`` with the reason: never a pass.

Shipped to GPU nodes in the agent bundle (Python 3.9, standard library and navarch's
bundled modules only): no ``match``, no ``X | Y`` outside annotations.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.agent.acceptance_tools import TOOL_TESTS, FakeToolHost, SystemToolHost, ToolHost
from navarch.agent.gpu import GpuProbe, fake_requested
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceRun,
    AcceptanceStatus,
    AcceptanceTest,
)
from navarch.report.compat import UTC

if TYPE_CHECKING:
    from navarch.agent.config import AgentConfig

__all__ = [
    "TICK_BUDGET_S",
    "ToolTest",
    "acceptance_step",
    "apply_overrides",
    "bound_tool_tests",
    "inventory_results",
    "load_overrides",
    "real_tool_tests",
    "run_named_tests",
    "runs_tests",
    "tick_run",
    "ToolBench",
]

log = logging.getLogger("navarch.agent")

#: Seconds of tool tests one timer tick may run before it writes its report; the rest of
#: the suite runs in the next ticks (see the module docstring).
TICK_BUDGET_S = 60.0

#: A tool test bound to its host: the policy in, one result out (it may raise: unknown).
ToolTest = Callable[[AcceptancePolicy], AcceptanceResult]

_GIB = 1 << 30

#: The tool_version of a result the agent read from its own GPU probe.
_INVENTORY = "navarch agent"


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- the fake backend's overrides -----------------------------------------------------------


def load_overrides(path: str | None) -> dict[str, Any]:
    """The overrides file's JSON object (``{"nccl_busbw_gbps": 120, "driver": "550.54.14"}``);
    {} when path is None or the file is missing. Raises ValueError for a file that is not
    a JSON object."""
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: acceptance overrides must be a JSON object")
    return doc


def apply_overrides(probe: GpuProbe, overrides: Mapping[str, Any]) -> GpuProbe:
    """The fake probe as the overrides make it: ``gpu_count`` keeps that many GPUs,
    ``pcie_width`` sets every GPU's current link width, ``driver`` the driver version."""
    gpus = probe.gpus
    if "gpu_count" in overrides:
        gpus = gpus[: max(0, int(overrides["gpu_count"]))]
    if "pcie_width" in overrides:
        width = int(overrides["pcie_width"])
        gpus = tuple(replace(g, pcie_link_width=width) for g in gpus)
    driver = str(overrides["driver"]) if "driver" in overrides else probe.driver_version
    return replace(probe, gpus=gpus, device_count=len(gpus), driver_version=driver)


def bound_tool_tests(host: ToolHost) -> list[tuple[str, ToolTest]]:
    """navarch.agent.acceptance_tools' TOOL_TESTS, in their run order, each bound to host
    (a real node's SystemToolHost, or the fake backend's FakeToolHost)."""
    return [
        (test.value, functools.partial(_with_host, fn, host)) for test, fn in TOOL_TESTS.items()
    ]


def _with_host(
    fn: Callable[[AcceptancePolicy, ToolHost], AcceptanceResult],
    host: ToolHost,
    policy: AcceptancePolicy,
) -> AcceptanceResult:
    return fn(policy, host)


# --- inventory ------------------------------------------------------------------------------


def _result(
    test: AcceptanceTest,
    ok: bool,
    figure: float | None,
    threshold: float | None,
    unit: str,
    reason: str,
) -> AcceptanceResult:
    return AcceptanceResult(
        test.value,
        AcceptanceStatus.PASS if ok else AcceptanceStatus.FAIL,
        figure=figure,
        threshold=threshold,
        unit=unit,
        tool_version=_INVENTORY,
        reason="" if ok else reason,
    )


def inventory_results(policy: AcceptancePolicy, probe: GpuProbe) -> list[AcceptanceResult]:
    """The inventory tests the agent's GPU probe can answer, in AcceptanceTest order.

    gpu_count (against expected_gpu_count), gpu_memory (smallest GPU, GiB, against
    expected_gpu_memory_bytes), pcie_link (narrowest current width against
    expected_pcie_width, else each GPU's own maximum), nvlink (fewest active links against
    expected_nvlink_links), ecc_mode and persistence_mode (GPUs with it off), versions
    (pass; detail: the driver, judged by the planner). A reading no GPU gives is left out.
    """
    gpus = probe.gpus
    out: list[AcceptanceResult] = []
    if policy.expected_gpu_count is not None:
        n = len(gpus)
        want = policy.expected_gpu_count
        out.append(
            _result(
                AcceptanceTest.GPU_COUNT, n == want, n, want, "GPUs", f"{n} of {want} GPUs seen"
            )
        )
    mems = [g.memory_total_bytes for g in gpus if g.memory_total_bytes is not None]
    if policy.expected_gpu_memory_bytes is not None and mems:
        low, want_b = min(mems), policy.expected_gpu_memory_bytes
        # Drivers report a little less than the marketed size (reserved memory): 5% slack.
        out.append(
            _result(
                AcceptanceTest.GPU_MEMORY,
                low >= 0.95 * want_b,
                round(low / _GIB, 1),
                round(want_b / _GIB, 1),
                "GiB",
                "a GPU has less memory than the pool's spec",
            )
        )
    widths = [(g.pcie_link_width, g.pcie_link_width_max) for g in gpus if g.pcie_link_width]
    if widths:
        cur = min(w for w, _ in widths)
        want_w = policy.expected_pcie_width or max(m or w for w, m in widths)
        out.append(
            _result(
                AcceptanceTest.PCIE_LINK,
                cur >= want_w,
                cur,
                want_w,
                "lanes",
                "a GPU's PCIe link trained below its width",
            )
        )
    links = [sum(g.nvlink_active) for g in gpus if g.nvlink_active is not None]
    if links and policy.expected_nvlink_links is not None:
        low_l = min(links)
        out.append(
            _result(
                AcceptanceTest.NVLINK,
                low_l >= policy.expected_nvlink_links,
                low_l,
                policy.expected_nvlink_links,
                "links",
                "NVLink links down",
            )
        )
    for test, attr in (
        (AcceptanceTest.ECC_MODE, "ecc_mode_current"),
        (AcceptanceTest.PERSISTENCE_MODE, "persistence_mode"),
    ):
        modes = [getattr(g, attr) for g in gpus if getattr(g, attr) is not None]
        if modes:
            off = sum(1 for m in modes if not m)
            out.append(_result(test, off == 0, off, 0, "GPUs off", f"{off} GPUs with it off"))
    if probe.driver_version:
        out.append(
            AcceptanceResult(
                AcceptanceTest.VERSIONS.value,
                AcceptanceStatus.PASS,
                tool_version=_INVENTORY,
                detail={"driver": probe.driver_version},
            )
        )
    return out


# --- one tick of the suite ------------------------------------------------------------------


def _prior(doc: Mapping[str, Any] | None) -> AcceptanceRun | None:
    if not doc:
        return None
    try:
        return AcceptanceRun.from_json(doc)
    except (KeyError, TypeError, ValueError):
        return None  # a state from another version: run the suite afresh


def _capped(r: AcceptanceResult) -> AcceptanceResult:
    """r within the report schema's limits (a longer text would get the whole report
    rejected): test 64, unit 32, tool_version 256, reason 1024 characters, 32 detail
    entries of 256."""
    detail = {str(k)[:256]: str(v)[:256] for k, v in list(r.detail.items())[:32]}
    return replace(
        r,
        test=r.test[:64],
        unit=r.unit[:32],
        tool_version=r.tool_version[:256],
        reason=r.reason[:1024],
        detail=detail,
    )


def _inventory_versions(r: AcceptanceResult) -> bool:
    """r is the inventory's versions reading (the driver only), not yet the tool's."""
    return r.test == AcceptanceTest.VERSIONS.value and r.tool_version == _INVENTORY


def _merged(results: list[AcceptanceResult], new: AcceptanceResult) -> list[AcceptanceResult]:
    """results with new added: a versions reading from the tool takes the inventory's
    place; an unknown one leaves the inventory's (the driver read through NVML), with the
    reason the tool gave, since the driver alone is still a reading."""
    if new.test != AcceptanceTest.VERSIONS.value:
        return [*results, new]
    for i, r in enumerate(results):
        if r.test == new.test:
            if new.status is AcceptanceStatus.UNKNOWN:
                note = f"driver only (NVML): {new.reason}"[:1024]
                kept = replace(r, reason=note, tool_version="NVML")
                return [*results[:i], kept, *results[i + 1 :]]
            return [*results[:i], new, *results[i + 1 :]]
    return [*results, new]


#: Tool tests that address whole GPUs: under MIG mode they cannot run as the pool means
#: them (dcgmi diag, nvbandwidth and all_reduce_perf see MIG instances, not GPUs; NVIDIA
#: MIG user guide, "CUDA device enumeration"), so they say so instead of failing.
MIG_NOT_APPLICABLE = frozenset(
    {
        AcceptanceTest.DCGM_DIAG.value,
        AcceptanceTest.NVBANDWIDTH.value,
        AcceptanceTest.NCCL_ALL_REDUCE.value,
        AcceptanceTest.NCCL_MULTI_NODE.value,
    }
)


def _mig_not_applicable(name: str, probe: GpuProbe) -> AcceptanceResult | None:
    """An unknown result naming the MIG GPUs when test `name` cannot run under MIG."""
    mig = [g.index for g in probe.gpus if g.mig_current]
    if name not in MIG_NOT_APPLICABLE or not mig:
        return None
    reason = f"not applicable: MIG mode is on for GPUs {mig}; the test needs whole GPUs"
    return AcceptanceResult(name, AcceptanceStatus.UNKNOWN, reason=reason)


def acceptance_step(
    policy: AcceptancePolicy,
    prior: Mapping[str, Any] | None,
    boot_id: str,
    reset: bool,
    probe: GpuProbe,
    tool_tests: Sequence[tuple[str, ToolTest]],
    now: datetime,
    *,
    budget_s: float = TICK_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> AcceptanceRun:
    """This tick's acceptance run: the saved one when it is of this boot and GPU-reset
    generation and finished, else that run taken on (or a new one) by running the missing
    tests until budget_s of tool time is spent.

    prior: the state's saved run (AgentState.acceptance; {} or None: none); reset: the GPUs
    were reset since the last tick (a new generation: the suite runs again); probe: this
    tick's GPU probe (the inventory tests); tool_tests: (name, test) in run order; now:
    aware UTC; clock: seconds, for the budget. Never raises: a test that raises is
    ``unknown`` with the reason, and so is a test of MIG_NOT_APPLICABLE on a node with MIG
    mode on (not run: unknown is never a pass). Each result is cut to the report schema's
    limits.
    """
    run = _prior(prior)
    if run is None or run.boot_id != boot_id:
        run = AcceptanceRun(boot_id, policy.depth, _iso(now), reset=0)
    elif reset:
        run = AcceptanceRun(boot_id, policy.depth, _iso(now), reset=run.reset + 1)
    if run.finished_at is not None:
        return run
    results = list(run.results) or inventory_results(policy, probe)
    # The inventory reads only the driver; the versions tool reads CUDA, VBIOS, InfoROM and
    # NIC firmware too, so it runs even so and its reading supersedes the inventory's.
    done = {r.test for r in results if not _inventory_versions(r)}
    start = clock()
    left = [(name, test) for name, test in tool_tests if name not in done]
    for name, test in list(left):
        if clock() - start >= budget_s:
            break
        began = clock()
        try:
            result = _mig_not_applicable(name, probe) or test(policy)
        except Exception as exc:  # a broken tool or parser is doubt, never a pass
            result = AcceptanceResult(
                name, AcceptanceStatus.UNKNOWN, reason=f"test raised: {exc}"[:300]
            )
        if result.duration_s is None:
            result = replace(result, duration_s=round(clock() - began, 3))
        results = _merged(results, _capped(result))
        left.remove((name, test))
    return replace(run, results=tuple(results), finished_at=None if left else _iso(now))


def real_tool_tests(policy: AcceptancePolicy) -> list[tuple[str, ToolTest]]:
    """The tool tests of a real node (NVML backend), in run order: every test of
    navarch.agent.acceptance_tools run on this host's programs and sysfs."""
    return bound_tool_tests(SystemToolHost())


def runs_tests(prior: Mapping[str, Any] | None, boot_id: str, reset: bool) -> bool:
    """Whether a tick runs acceptance tests: no finished run of this boot and GPU-reset
    generation in the saved state.

    prior: the state's saved run (AgentState.acceptance; {} or None: none; a run this
    version cannot read counts as none); boot_id: this boot's; reset: the GPUs were reset
    since the last tick (a new generation). Never raises. Source: docs/acceptance.md (the
    suite runs once per boot and again after a GPU reset)."""
    run = _prior(prior)
    return run is None or run.boot_id != boot_id or reset or run.finished_at is None


def _instance_type(config: AgentConfig) -> str:
    """The node's instance type from the metadata service ("" when it does not say)."""
    from navarch.agent.acceptance_tools.instance_type import read_instance_type

    found, errors = read_instance_type(
        config.metadata, endpoint=config.metadata_endpoint, timeout_s=config.metadata_timeout_s
    )
    if errors:
        log.info("instance_type_unread", extra={"fields": {"errors": errors}})
    return found


@dataclass(frozen=True)
class ToolBench:
    """Where a fake node's acceptance tools run when the caller, not the overrides file,
    says (the simulator): overrides as FakeToolHost takes them (they also shape the
    inventory probe, apply_overrides), the tool host to run them on, and the clock the
    tick's budget is spent on (seconds; a virtual one advances by each tool's time)."""

    overrides: Mapping[str, Any]
    host: ToolHost
    clock: Callable[[], float]


def tick_run(
    config: AgentConfig,
    prior: Mapping[str, Any] | None,
    boot_id: str,
    reset: bool,
    probe: GpuProbe,
    now: datetime,
    bench: ToolBench | None = None,
) -> AcceptanceRun | None:
    """This tick's acceptance run for the agent (acceptance_step), or None when the config
    has no enabled policy. The fake backend's tools answer from config.acceptance_file
    (an unreadable one is logged and answers as a healthy node), its inventory as the
    overrides make it; a real node runs real_tool_tests. A policy that names no instance
    type gets the node's from the metadata service (config.metadata) on the ticks that
    run tests, so the published per-type baselines (acceptance_tools.thresholds) apply.
    bench (fake backend only): the overrides, tool host and clock to use instead of the
    file and the monotonic clock."""
    policy = config.acceptance
    if policy is None or not policy.enabled:
        return None
    if not policy.instance_type and runs_tests(prior, boot_id, reset):
        policy = replace(policy, instance_type=_instance_type(config))
    if probe.backend == "fake" and bench is not None:
        probe = apply_overrides(probe, bench.overrides)
        tests = bound_tool_tests(bench.host)
        return acceptance_step(policy, prior, boot_id, reset, probe, tests, now, clock=bench.clock)
    if probe.backend == "fake":
        try:
            overrides = load_overrides(config.acceptance_file)
            host = FakeToolHost({k: str(v) for k, v in overrides.items()})
        except ValueError as exc:
            log.warning("acceptance_overrides_invalid", extra={"fields": {"error": str(exc)}})
            overrides, host = {}, FakeToolHost()
        probe = apply_overrides(probe, overrides)
        # The fake tools' own clock: their modelled run times (tool_time_s) spend the
        # tick's budget as a real suite's minutes do.
        return acceptance_step(
            policy,
            prior,
            boot_id,
            reset,
            probe,
            bound_tool_tests(host),
            now,
            clock=lambda: host.elapsed_s,
        )
    return acceptance_step(policy, prior, boot_id, reset, probe, real_tool_tests(policy), now)


def run_named_tests(
    config: AgentConfig, names: Sequence[str], *, level: int | None = None
) -> list[AcceptanceResult]:
    """Run the named tool tests once, now, outside the acceptance (a scheduled idle window:
    the reconciler cordoned and drained the node first), and return one result each.

    names: AcceptanceTest values of tools (TOOL_TESTS), in the order to run; config: the
    agent's (its acceptance policy's thresholds, or the defaults when it has none; the
    fake backend's tools, config.fake_gpu or NAVARCH_FAKE_GPU, answer from
    config.acceptance_file); level: dcgmi diag's level (None: the policy's). The node's
    instance type comes from the metadata service when the policy names none. A test that
    raises is ``unknown``. Raises ValueError naming the unknown test names.
    """
    known = {t.value for t in TOOL_TESTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"unknown acceptance test(s) {', '.join(unknown)}; "
            f"tool tests: {', '.join(sorted(known))}"
        )
    policy = config.acceptance or AcceptancePolicy()
    if level is not None:
        policy = replace(policy, dcgm_diag_level=level)
    if not policy.instance_type:
        policy = replace(policy, instance_type=_instance_type(config))
    if fake_requested(config.fake_gpu):
        try:
            host: ToolHost = FakeToolHost(
                {k: str(v) for k, v in load_overrides(config.acceptance_file).items()}
            )
        except ValueError as exc:
            log.warning("acceptance_overrides_invalid", extra={"fields": {"error": str(exc)}})
            host = FakeToolHost()
    else:
        host = SystemToolHost()
    tests = dict(bound_tool_tests(host))
    out: list[AcceptanceResult] = []
    for name in names:
        try:
            result = tests[name](policy)
        except Exception as exc:  # a broken tool or parser is doubt, never a pass
            result = AcceptanceResult(
                name, AcceptanceStatus.UNKNOWN, reason=f"test raised: {exc}"[:300]
            )
        out.append(_capped(result))
    return out
