"""Burn-in on the node: run the pool's acceptance suite once per boot (and again after a
GPU reset) and keep the run in the agent's state, so every report of the boot carries it.

The suite is two kinds of test:

- inventory tests, read from the GPU probe the agent makes anyway (``inventory_results``):
  GPU count and memory per GPU against the pool's spec, PCIe link width at its maximum,
  NVLink links active, ECC mode and persistence mode on, and the driver version (the
  planner compares versions with the pool's baseline: one decider for drift). A reading
  the backend does not give is not tested (never a pass by default);
- tool tests (dcgmi diag, nvbandwidth, NCCL all_reduce_perf, ...), an injectable list of
  ``(test name, ToolTest)``: navarch.agent.acceptance_tools's registry on a real node, and
  ``fake_tool_tests`` for the fake GPU backend, which answer from the overrides file
  (``AgentConfig.acceptance_file``, written by ``navarch local inject --acceptance``).

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

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceRun,
    AcceptanceStatus,
    AcceptanceTest,
    DriftPolicy,
    SuiteDepth,
)
from navarch.agent.gpu import GpuProbe
from navarch.compat import UTC
from navarch.errors import ConfigError

if TYPE_CHECKING:
    from navarch.agent.config import AgentConfig

__all__ = [
    "FAKE_DEFAULTS",
    "TICK_BUDGET_S",
    "ToolTest",
    "acceptance_step",
    "apply_overrides",
    "fake_tool_tests",
    "inventory_results",
    "load_overrides",
    "policy_from_mapping",
    "policy_to_mapping",
    "real_tool_tests",
    "tick_run",
]

log = logging.getLogger("navarch.agent")

#: Seconds of tool tests one timer tick may run before it writes its report; the rest of
#: the suite runs in the next ticks (see the module docstring).
TICK_BUDGET_S = 60.0

#: A tool test bound to its host: the policy in, one result out (it may raise: unknown).
ToolTest = Callable[[AcceptancePolicy], AcceptanceResult]

#: What the fake backend's tools answer when the overrides file does not say: a healthy
#: H100-class node (NCCL all_reduce_perf busbw about 240 GB/s on 8 H100 SXM with NVLink,
#: nvbandwidth device-to-device about 400 GB/s; /work/shared/reference/acceptance-tools.md).
FAKE_DEFAULTS: Mapping[str, Any] = {
    "nccl_busbw_gbps": 240.0,
    "nvbandwidth_gbps": 400.0,
    "dcgm_diag": "pass",
}

_GIB = 1 << 30


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- the policy as agent.yaml holds it ------------------------------------------------------


def policy_to_mapping(policy: AcceptancePolicy) -> dict[str, Any]:
    """The policy as agent.yaml's ``acceptance:`` mapping (field names, enums by value)."""
    out: dict[str, Any] = {}
    for f in fields(policy):
        value = getattr(policy, f.name)
        if isinstance(value, (SuiteDepth, DriftPolicy)):
            value = value.value
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def policy_from_mapping(doc: Any, file: str | None = None) -> AcceptancePolicy:
    """agent.yaml's ``acceptance:`` mapping -> AcceptancePolicy (missing keys: defaults).

    Raises ConfigError naming ``acceptance.KEY`` for an unknown key or a bad value.
    """
    if not isinstance(doc, Mapping):
        raise ConfigError("acceptance must be a mapping", file=file, key_path="acceptance")
    known = {f.name for f in fields(AcceptancePolicy)}
    kwargs: dict[str, Any] = {}
    for key, value in doc.items():
        where = f"acceptance.{key}"
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r}",
                file=file,
                key_path=where,
                hint=f"known keys: {', '.join(sorted(known))}",
            )
        try:
            if key == "depth":
                value = SuiteDepth(value)
            elif key == "drift":
                value = DriftPolicy(value)
            elif key == "versions":
                value = {str(k): str(v) for k, v in dict(value).items()}
            elif key in ("enabled", "multi_node"):
                if not isinstance(value, bool):
                    raise ValueError("expected true or false")
            elif value is not None and key != "dcgm_diag_level" and not key.startswith("expected_"):
                value = float(value)
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError("expected a number")
                value = value if key == "expected_ib_rate_gbps" else int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad value {value!r}: {exc}", file=file, key_path=where) from exc
        kwargs[key] = value
    return AcceptancePolicy(**kwargs)


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


def _fake_nccl(overrides: Mapping[str, Any]) -> ToolTest:
    def test(policy: AcceptancePolicy) -> AcceptanceResult:
        busbw = float(overrides.get("nccl_busbw_gbps", FAKE_DEFAULTS["nccl_busbw_gbps"]))
        floor = policy.nccl_min_busbw_gbps
        ok = floor is None or busbw >= floor
        return AcceptanceResult(
            AcceptanceTest.NCCL_ALL_REDUCE.value,
            AcceptanceStatus.PASS if ok else AcceptanceStatus.FAIL,
            figure=busbw,
            threshold=floor,
            unit="GB/s",
            tool_version="fake all_reduce_perf",
            reason="" if ok else "bus bandwidth below the pool's floor",
        )

    return test


def _fake_nvbandwidth(overrides: Mapping[str, Any]) -> ToolTest:
    def test(policy: AcceptancePolicy) -> AcceptanceResult:
        gbps = float(overrides.get("nvbandwidth_gbps", FAKE_DEFAULTS["nvbandwidth_gbps"]))
        floor = policy.nvbandwidth_min_gbps
        ok = floor is None or gbps >= floor
        return AcceptanceResult(
            AcceptanceTest.NVBANDWIDTH.value,
            AcceptanceStatus.PASS if ok else AcceptanceStatus.FAIL,
            figure=gbps,
            threshold=floor,
            unit="GB/s",
            tool_version="fake nvbandwidth",
            reason="" if ok else "device-to-device bandwidth below the pool's floor",
        )

    return test


def _fake_dcgm(overrides: Mapping[str, Any]) -> ToolTest:
    def test(policy: AcceptancePolicy) -> AcceptanceResult:
        said = str(overrides.get("dcgm_diag", FAKE_DEFAULTS["dcgm_diag"])).lower()
        status = {"pass": AcceptanceStatus.PASS, "fail": AcceptanceStatus.FAIL}.get(
            said, AcceptanceStatus.UNKNOWN
        )
        reason = {"pass": "", "fail": "a diagnostic test failed"}.get(said, f"said {said!r}")
        return AcceptanceResult(
            AcceptanceTest.DCGM_DIAG.value,
            status,
            tool_version="fake dcgmi",
            reason=f"dcgmi diag -r {policy.dcgm_diag_level}: {reason}".rstrip(": "),
            detail={"level": str(policy.dcgm_diag_level)},
        )

    return test


def fake_tool_tests(overrides: Mapping[str, Any]) -> list[tuple[str, ToolTest]]:
    """The fake backend's tool tests (dcgm_diag, nvbandwidth, nccl_all_reduce), answering
    from the overrides (FAKE_DEFAULTS otherwise): the local provider and the tests."""
    return [
        (AcceptanceTest.DCGM_DIAG.value, _fake_dcgm(overrides)),
        (AcceptanceTest.NVBANDWIDTH.value, _fake_nvbandwidth(overrides)),
        (AcceptanceTest.NCCL_ALL_REDUCE.value, _fake_nccl(overrides)),
    ]


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
        tool_version="navarch agent",
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
                tool_version="navarch agent",
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
    ``unknown`` with the reason. Each result is cut to the report schema's limits.
    """
    run = _prior(prior)
    if run is None or run.boot_id != boot_id:
        run = AcceptanceRun(boot_id, policy.depth, _iso(now), reset=0)
    elif reset:
        run = AcceptanceRun(boot_id, policy.depth, _iso(now), reset=run.reset + 1)
    if run.finished_at is not None:
        return run
    results = list(run.results) or inventory_results(policy, probe)
    done = {r.test for r in results}
    start = clock()
    left = [(name, test) for name, test in tool_tests if name not in done]
    for name, test in list(left):
        if clock() - start >= budget_s:
            break
        began = clock()
        try:
            result = test(policy)
        except Exception as exc:  # a broken tool or parser is doubt, never a pass
            result = AcceptanceResult(
                name, AcceptanceStatus.UNKNOWN, reason=f"test raised: {exc}"[:300]
            )
        if result.duration_s is None:
            result = replace(result, duration_s=round(clock() - began, 3))
        results.append(_capped(result))
        left.remove((name, test))
    return replace(run, results=tuple(results), finished_at=None if left else _iso(now))


def real_tool_tests(policy: AcceptancePolicy) -> list[tuple[str, ToolTest]]:
    """The tool tests of a real node (NVML backend), in run order. The tools' runners and
    parsers (dcgmi diag, nvbandwidth, all_reduce_perf) live in
    navarch.agent.acceptance_tools and are bound here; without them a real node's suite
    is its inventory tests alone."""
    return []


def tick_run(
    config: AgentConfig,
    prior: Mapping[str, Any] | None,
    boot_id: str,
    reset: bool,
    probe: GpuProbe,
    now: datetime,
) -> AcceptanceRun | None:
    """This tick's acceptance run for the agent (acceptance_step), or None when the config
    has no enabled policy. The fake backend's tools answer from config.acceptance_file
    (an unreadable one is logged and answers with FAKE_DEFAULTS), its inventory as the
    overrides make it; a real node runs real_tool_tests."""
    policy = config.acceptance
    if policy is None or not policy.enabled:
        return None
    if probe.backend == "fake":
        try:
            overrides = load_overrides(config.acceptance_file)
        except ValueError as exc:
            log.warning("acceptance_overrides_invalid", extra={"fields": {"error": str(exc)}})
            overrides = {}
        probe = apply_overrides(probe, overrides)
        tests = fake_tool_tests(overrides)
    else:
        tests = real_tool_tests(policy)
    return acceptance_step(policy, prior, boot_id, reset, probe, tests, now)
