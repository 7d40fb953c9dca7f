"""The node's acceptance tests: one function per test, ``run_<test>(policy, host)``, and the
registry ``TOOL_TESTS`` the agent loops over.

Each function runs its tool through a ToolHost, parses the output with the parser beside
it (dcgm, nvbandwidth, nccl, smi, sysfs) and returns one AcceptanceResult: the figure and
its unit, the floor it was held to and where the floor comes from (thresholds), the tool's
version, and a one-line reason. A tool that is missing (exit 127), times out, exits with an
error, or prints what its parser does not know gives ``unknown`` with the reason, never a
pass. A figure with no absolute floor passes here: the relative check (``min_fraction`` of
the pool's median) needs the pool, so the planner makes it from the figure and unit.

Both depths run the same tests; ``deep`` runs dcgmi diag at level 3 (or the pool's level if
higher; DCGM: "~15 minutes") and more iterations of the bandwidth tools. Tests that load
the GPUs (dcgm_diag, nvbandwidth, nccl_all_reduce) must run only on a cordoned node: the
acceptance, or a scheduled idle window; the caller decides when.

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import wraps

from navarch.agent.acceptance_tools import nvbandwidth as nvbw
from navarch.agent.acceptance_tools.dcgm import DIAG_LEVELS, DiagOutcome, parse_dcgmi_diag
from navarch.agent.acceptance_tools.host import ToolHost, ToolOutput
from navarch.agent.acceptance_tools.nccl import parse_all_reduce_perf
from navarch.agent.acceptance_tools.smi import SmiLog, parse_nvidia_smi_xml
from navarch.agent.acceptance_tools.sysfs import gpu_pcie_links, ib_ports, nic_firmware
from navarch.agent.acceptance_tools.thresholds import (
    DEFAULT_NCCL_MESSAGE_BYTES,
    MEMORY_TOLERANCE,
    baseline_for,
    ib_expectation,
    nccl_floor,
    nvbandwidth_floors,
)
from navarch.report.acceptance import (
    DEEP_DIAG_LEVEL,
    FINDING_DETAIL,
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceStatus,
    AcceptanceTest,
    DriftPolicy,
    Finding,
    SuiteDepth,
)
from navarch.textsafe import node_text

__all__ = [
    "DEEP_DIAG_LEVEL",
    "TOOL_TESTS",
    "nccl_verdict",
    "run_dcgm_diag",
    "run_ecc_mode",
    "run_gpu_count",
    "run_gpu_memory",
    "run_ib_ports",
    "run_nccl_all_reduce",
    "run_nvbandwidth",
    "run_pcie_link",
    "run_persistence_mode",
    "run_tool_tests",
    "run_versions",
]

TestFn = Callable[[AcceptancePolicy, ToolHost], AcceptanceResult]

#: nvbandwidth -i samples: its default (3) quick; 10 deep, as Azure's health checks run it
#: (azurehpc-health-checks customTests/azure_gpu_bandwidth.nhc).
NVBANDWIDTH_SAMPLES = {SuiteDepth.QUICK: 3, SuiteDepth.DEEP: 10}
#: all_reduce_perf -n iterations: its default (20) quick, 100 deep.
NCCL_ITERATIONS = {SuiteDepth.QUICK: 20, SuiteDepth.DEEP: 100}
#: Longest tool version kept, in characters.
_VERSION_MAX_CHARS = 64
_TAIL_CHARS = 160
_NO_FLOOR = "no absolute floor: the planner compares it with the pool's median"


def _result(
    test: AcceptanceTest,
    status: AcceptanceStatus,
    reason: str,
    *,
    figure: float | None = None,
    threshold: float | None = None,
    unit: str = "",
    tool_version: str = "",
    detail: Mapping[str, str] | None = None,
) -> AcceptanceResult:
    """An AcceptanceResult whose node-supplied texts (reason, version, detail) are made
    plain and capped (navarch.textsafe): they reach the reconciler as hostile input."""
    return AcceptanceResult(
        test.value,
        status,
        figure=figure,
        threshold=threshold,
        unit=unit,
        tool_version=node_text(tool_version, _VERSION_MAX_CHARS),
        reason=node_text(reason),
        detail={node_text(k, 64): node_text(v) for k, v in (detail or {}).items()},
    )


def _reading(
    test: AcceptanceTest,
    *,
    figure: float | None = None,
    threshold: float | None = None,
    unit: str = "",
    tool_version: str = "",
    detail: Mapping[str, str] | None = None,
) -> AcceptanceResult:
    """A test's readings before its verdict (status UNKNOWN until _verdict gives one)."""
    return _result(
        test,
        AcceptanceStatus.UNKNOWN,
        "",
        figure=figure,
        threshold=threshold,
        unit=unit,
        tool_version=tool_version,
        detail=detail,
    )


def _verdict(
    base: AcceptanceResult,
    status: AcceptanceStatus,
    reason: str,
    threshold: float | None = None,
) -> AcceptanceResult:
    """The readings of `base` with a verdict, its reason, and the floor it was held to."""
    floor = base.threshold if threshold is None else threshold
    return replace(base, status=status, reason=node_text(reason), threshold=floor)


def _unknown(test: AcceptanceTest, reason: str, tool_version: str = "") -> AcceptanceResult:
    return _result(test, AcceptanceStatus.UNKNOWN, reason, tool_version=tool_version)


def _tail(out: ToolOutput) -> str:
    text = " ".join((out.stderr or out.stdout).split())
    return text[-_TAIL_CHARS:] or "no output"


def _run(
    test: AcceptanceTest, host: ToolHost, argv: Sequence[str], policy: AcceptancePolicy
) -> tuple[ToolOutput, AcceptanceResult | None]:
    """Run a tool; the second item is the ``unknown`` result when it could not give one."""
    out = host.run(argv, policy.timeout_s)
    if out.missing:
        why = f"{argv[0]} is not installed on the node (exit 127): install it or drop the test"
        return out, _unknown(test, why)
    if out.timed_out:
        return out, _unknown(test, f"{argv[0]} timed out after {policy.timeout_s:g} s")
    return out, None


def _timed(fn: TestFn) -> TestFn:
    """Fill the result's duration_s with the test's wall time (monotonic clock)."""

    @wraps(fn)
    def run(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
        start = time.monotonic()
        result = fn(policy, host)
        return replace(result, duration_s=round(time.monotonic() - start, 3))

    return run


def _versus_floor(
    base: AcceptanceResult, what: str, floor: float | None, source: str
) -> AcceptanceResult:
    """PASS or FAIL of base's GB/s figure against a floor (PASS without one: the planner
    holds it to the pool's median)."""
    figure = base.figure or 0.0
    if floor is None:
        return _verdict(base, AcceptanceStatus.PASS, f"{what} {figure:g} GB/s; {_NO_FLOOR}")
    status = AcceptanceStatus.PASS if figure >= floor else AcceptanceStatus.FAIL
    word = "at or above" if status is AcceptanceStatus.PASS else "below"
    reason = f"{what} {figure:g} GB/s, {word} the floor {floor:g} GB/s ({source})"
    return _verdict(base, status, reason, floor)


# -- inventory: nvidia-smi -q -x --------------------------------------------------------


def _smi(
    test: AcceptanceTest, policy: AcceptancePolicy, host: ToolHost
) -> SmiLog | AcceptanceResult:
    out, failed = _run(test, host, ("nvidia-smi", "-q", "-x"), policy)
    if failed is not None:
        return failed
    if out.exit_code != 0:
        return _unknown(test, f"nvidia-smi -q -x exited {out.exit_code}: {_tail(out)}")
    try:
        return parse_nvidia_smi_xml(out.stdout)
    except ValueError as exc:
        return _unknown(test, f"nvidia-smi -q -x: {exc}")


@_timed
def run_gpu_count(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """GPUs the driver sees (nvidia-smi's <gpu> elements) against expected_gpu_count.

    figure/threshold in "GPUs"; PASS with the figure when no count is expected. Source of
    the failure mode: a node that joined with 7 of 8 GPUs (NVIDIA/aicr issue #1858)."""
    test = AcceptanceTest.GPU_COUNT
    log = _smi(test, policy, host)
    if isinstance(log, AcceptanceResult):
        return log
    count = len(log.gpus)
    base = _reading(test, figure=float(count), unit="GPUs", tool_version=log.driver)
    expected = policy.expected_gpu_count
    if expected is None:
        return _verdict(base, AcceptanceStatus.PASS, f"{count} GPUs; none expected")
    ok = count == expected
    reason = f"{count} GPUs {'as' if ok else 'where'} the pool expects {expected}"
    status = AcceptanceStatus.PASS if ok else AcceptanceStatus.FAIL
    return _verdict(base, status, reason, float(expected))


@_timed
def run_gpu_memory(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """The smallest GPU framebuffer (bytes) against expected_gpu_memory_bytes: a GPU passes
    with at least MEMORY_TOLERANCE of it (the driver reserves some). UNKNOWN without GPUs
    or a GPU whose memory nvidia-smi does not give."""
    test = AcceptanceTest.GPU_MEMORY
    log = _smi(test, policy, host)
    if isinstance(log, AcceptanceResult):
        return log
    sizes = [g.memory_total_bytes for g in log.gpus]
    if not sizes or any(s is None for s in sizes):
        return _unknown(test, "nvidia-smi gave no framebuffer total for every GPU")
    by_gpu = {g.pci_bus_id: int(g.memory_total_bytes or 0) for g in log.gpus}
    low_gpu = min(by_gpu, key=lambda k: by_gpu[k])
    low = by_gpu[low_gpu]
    base = _reading(test, figure=float(low), unit="bytes", tool_version=log.driver)
    expected = policy.expected_gpu_memory_bytes
    if expected is None:
        return _verdict(base, AcceptanceStatus.PASS, f"{low:,} bytes on the smallest GPU")
    floor = expected * MEMORY_TOLERANCE
    if low >= floor:
        reason = (
            f"{low:,} bytes on the smallest GPU, at least {MEMORY_TOLERANCE:.0%} of {expected:,}"
        )
        return _verdict(base, AcceptanceStatus.PASS, reason, floor)
    reason = f"GPU {low_gpu} has {low:,} bytes, under {MEMORY_TOLERANCE:.0%} of the {expected:,} expected"
    return _verdict(base, AcceptanceStatus.FAIL, reason, floor)


def _mode_test(
    test: AcceptanceTest, policy: AcceptancePolicy, host: ToolHost, what: str
) -> AcceptanceResult:
    log = _smi(test, policy, host)
    if isinstance(log, AcceptanceResult):
        return log
    if not log.gpus:
        return _unknown(test, "nvidia-smi lists no GPU")
    ecc = test is AcceptanceTest.ECC_MODE
    on = {g.pci_bus_id: g.ecc_enabled if ecc else g.persistence_enabled for g in log.gpus}
    base = _reading(
        test,
        figure=float(sum(v is True for v in on.values())),
        threshold=float(len(on)),
        unit="GPUs",
        tool_version=log.driver,
    )
    unread = [k for k, v in on.items() if v is None]
    if unread:
        return _unknown(test, f"nvidia-smi does not say the {what} of GPU {', '.join(unread)}")
    off = [k for k, v in on.items() if not v]
    if off:
        pending = [g.pci_bus_id for g in log.gpus if ecc and g.ecc_pending_enabled]
        hint = "; enabled at the next reboot" if ecc and set(off) <= set(pending) else ""
        reason = f"{what} is off on GPU {', '.join(off)}{hint}"
        return _verdict(base, AcceptanceStatus.FAIL, reason)
    return _verdict(base, AcceptanceStatus.PASS, f"{what} on for all {len(on)} GPUs")


@_timed
def run_ecc_mode(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """ECC enabled (current mode) on every GPU; figure/threshold: GPUs with it on / GPUs.
    A GPU whose ECC is only pending (enabled at the next reboot) still fails."""
    return _mode_test(AcceptanceTest.ECC_MODE, policy, host, "ECC")


@_timed
def run_persistence_mode(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """Persistence mode on every GPU (DCGM 4's level 1 fails without it: error_id 29,
    DCGM dcgmlib/dcgm_errors.h); figure/threshold: GPUs with it on / GPUs."""
    return _mode_test(AcceptanceTest.PERSISTENCE_MODE, policy, host, "persistence mode")


# -- versions ---------------------------------------------------------------------------


def _one(values: Sequence[str]) -> str:
    """One component's version across GPUs or HCAs: the value, or every distinct value
    joined by "," (a node that mixes versions is drift in itself)."""
    return ",".join(dict.fromkeys(v for v in values if v))


@_timed
def run_versions(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """Driver, CUDA, VBIOS and InfoROM (nvidia-smi -q -x) and NIC firmware (sysfs fw_ver)
    against the pool's declared baseline (policy.versions, by the same names).

    detail: every component's version (a component that differs across the node's GPUs or
    HCAs lists each value, and is drift). Drift from the baseline fails under
    DriftPolicy.BLOCK and passes with the drift named under WARN. Without a declared
    baseline the versions pass here and the planner compares them with the majority of the
    pool's serving nodes."""
    test = AcceptanceTest.VERSIONS
    log = _smi(test, policy, host)
    if isinstance(log, AcceptanceResult):
        return log
    found = {
        "driver": log.driver,
        "cuda": log.cuda,
        "vbios": _one([g.vbios for g in log.gpus]),
        "inforom": _one([g.inforom for g in log.gpus]),
        "nic_firmware": _one(list(nic_firmware(host).values())),
    }
    detail = {k: v for k, v in found.items() if v}
    drift = [
        f"{name} {found.get(name) or 'unreadable'} (pool: {want})"
        for name, want in sorted(policy.versions.items())
        if found.get(name) != want
    ]
    drift += [f"{name} differs across the node: {v}" for name, v in detail.items() if "," in v]
    base = _reading(test, detail=detail, tool_version=log.driver)
    if not drift:
        baseline = "the pool's baseline" if policy.versions else "no declared baseline"
        return _verdict(base, AcceptanceStatus.PASS, f"versions match {baseline}")
    reason = "drift: " + "; ".join(drift)
    if policy.drift is DriftPolicy.WARN:
        return _verdict(base, AcceptanceStatus.PASS, reason + " (drift: warn)")
    return _verdict(base, AcceptanceStatus.FAIL, reason)


# -- links: sysfs -----------------------------------------------------------------------


@_timed
def run_pcie_link(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """Every NVIDIA GPU's PCIe link at its full width (current_link_width == max_link_width,
    and at least expected_pcie_width) and, when expected_pcie_gen is set, at that
    generation (current_link_speed). figure: the narrowest link in lanes; threshold: the
    lanes required.

    The generation is only held to a declared one: an idle GPU may train its link down to
    save power (the current speed then reads lower), so the registry runs this test after
    the bandwidth tests have loaded the links. Source: Linux sysfs-bus-pci ABI."""
    test = AcceptanceTest.PCIE_LINK
    try:
        links = gpu_pcie_links(host)
    except OSError as exc:
        return _unknown(test, f"cannot list /sys/bus/pci/devices: {exc}")
    if not links:
        return _unknown(test, "no NVIDIA GPU in /sys/bus/pci/devices")
    if any(link.width_current is None or link.width_max is None for link in links):
        return _unknown(test, "a GPU's link width is not readable in sysfs")
    need = {
        link.address: max(link.width_max or 0, policy.expected_pcie_width or 0) for link in links
    }
    narrow = [
        f"{k.address} x{k.width_current} of x{need[k.address]}"
        for k in links
        if (k.width_current or 0) < need[k.address]
    ]
    low = min(links, key=lambda k: k.width_current or 0)
    want_gen = policy.expected_pcie_gen
    slow = [
        f"{k.address} Gen{k.gen_current or '?'} of Gen{want_gen}"
        for k in links
        if want_gen is not None and (k.gen_current or 0) < want_gen
    ]
    detail = {k.address: f"Gen{k.gen_current or '?'} x{k.width_current}" for k in links}
    base = _reading(
        test,
        figure=float(low.width_current or 0),
        threshold=float(need[low.address]),
        unit="lanes",
        detail=detail,
    )
    if narrow or slow:
        reason = "PCIe link below its maximum: " + "; ".join(narrow + slow)
        return _verdict(base, AcceptanceStatus.FAIL, reason)
    return _verdict(base, AcceptanceStatus.PASS, f"all {len(links)} GPU links at full width")


def _rate(gbps: float | None) -> str:
    return "?" if gbps is None else f"{gbps:g}"


@_timed
def run_ib_ports(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """InfiniBand/EFA ports ACTIVE at their rated speed (sysfs state and rate) against the
    pool's expected_ib_ports / expected_ib_rate_gbps, else the type's published baseline.

    figure: ports ACTIVE at the rate (every ACTIVE port without a rate); threshold: ports
    expected ("ports"). PASS with the figure when nothing is expected."""
    test = AcceptanceTest.IB_PORTS
    ports = ib_ports(host)
    want_ports, want_rate, source = ib_expectation(policy)
    good = [
        p
        for p in ports
        if p.state == "ACTIVE" and (want_rate is None or (p.rate_gbps or 0) >= want_rate)
    ]
    bad = [
        f"{p.device}/{p.port} {p.state or 'unreadable'} at {_rate(p.rate_gbps)} Gb/s"
        for p in ports
        if p not in good
    ]
    base = _reading(
        test,
        figure=float(len(good)),
        unit="ports",
        detail={f"{p.device}/{p.port}": f"{p.state} {_rate(p.rate_gbps)} Gb/s" for p in ports},
    )
    if want_ports is None:
        note = f"; not active at rate: {', '.join(bad)}" if bad else ""
        return _verdict(
            base, AcceptanceStatus.PASS, f"{len(good)} ports active; none expected{note}"
        )
    rate = f" at {want_rate:g} Gb/s" if want_rate is not None else ""
    reason = f"{len(good)} of {want_ports} expected ports active{rate} ({source})"
    if bad:
        reason += ": " + "; ".join(bad)
    status = AcceptanceStatus.PASS if len(good) >= want_ports else AcceptanceStatus.FAIL
    return _verdict(base, status, reason, float(want_ports))


# -- active tests -----------------------------------------------------------------------


def diag_level(policy: AcceptancePolicy) -> int:
    """The dcgmi diag level this policy runs: its own for quick, at least DEEP_DIAG_LEVEL
    for deep."""
    return policy.diag_level()


@_timed
def run_dcgm_diag(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """``dcgmi diag -r LEVEL -j`` (diag_level): PASS when every DCGM test passed (Skip and
    Warn never fail, as DCGM's own verdict), FAIL naming the failed tests and GPUs,
    UNKNOWN when dcgmi is missing, times out, reports a runtime error, or prints a status
    word DCGM does not document. figure: failed tests ("tests"); detail: the level and
    each test's status. Source: DCGM dcgmi/Diag.cpp (JSON writer, exit 226 on a failure)."""
    test = AcceptanceTest.DCGM_DIAG
    level = diag_level(policy)
    if level not in DIAG_LEVELS:
        return _unknown(test, f"dcgm_diag_level {level} is not one of {DIAG_LEVELS}")
    out, failed = _run(test, host, ("dcgmi", "diag", "-r", str(level), "-j"), policy)
    if failed is not None:
        return failed
    diag = parse_dcgmi_diag(
        out.stdout, level=level, exit_code=out.exit_code, output_tail=_tail(out)
    )
    version = diag.version or ""
    if diag.outcome in (DiagOutcome.ERROR, DiagOutcome.UNAVAILABLE, DiagOutcome.RUNNING):
        return _unknown(test, diag.detail, version)
    odd = [
        t.name for t in diag.tests if t.status not in ("pass", "fail", "warn", "skip", "not run")
    ]
    if odd:
        return _unknown(test, f"dcgmi diag -r {level}: unknown status of {', '.join(odd)}", version)
    status = AcceptanceStatus.FAIL if diag.fault else AcceptanceStatus.PASS
    if not diag.fault and out.exit_code != 0:
        return _unknown(
            test, f"dcgmi diag -r {level} exited {out.exit_code} without a failed test", version
        )
    detail = {"level": str(level), **{t.name: t.status for t in diag.tests}}
    reason = diag.detail
    if diag.settings_only:
        # DCGM's own category says the image, not the GPU: the planner holds, never replaces.
        detail[FINDING_DETAIL] = Finding.SETTING.value
        reason = f"a setting of the image, not the hardware: {reason}"
    return _result(
        test,
        status,
        reason,
        figure=float(len(diag.failed)),
        threshold=0.0,
        unit="tests",
        tool_version=version,
        detail=detail,
    )


@_timed
def run_nvbandwidth(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """nvbandwidth's copy-engine testcases host_to_device_memcpy_ce, device_to_host_memcpy_ce
    and device_to_device_memcpy_read_ce, one run each.

    figure: the slowest GPU's host<->device bandwidth (GB/s), against the host floor
    (thresholds.nvbandwidth_floors); the slowest GPU pair's device-to-device figure is held
    to the published baseline where there is one and is in detail (``d2d_min_gbps``) for
    the planner. A waived device-to-device testcase (no peer access, e.g. one GPU) is left
    out; an Error or Not Found testcase, or output without its matrix, is UNKNOWN."""
    test = AcceptanceTest.NVBANDWIDTH
    samples = str(NVBANDWIDTH_SAMPLES[policy.depth])
    version = ""
    mins: dict[str, tuple[float, str]] = {}
    for name in (nvbw.H2D, nvbw.D2H, nvbw.D2D):
        out, failed = _run(test, host, ("nvbandwidth", "-t", name, "-i", samples), policy)
        if failed is not None:
            return failed
        try:
            parsed = nvbw.parse_nvbandwidth(out.stdout)
        except ValueError as exc:
            return _unknown(test, f"nvbandwidth -t {name} (exit {out.exit_code}): {exc}")
        version = parsed.version or version
        case = parsed.cases.get(name)
        if case is not None and case.status == "Waived" and name == nvbw.D2D:
            continue
        slowest = case.slowest() if case is not None else None
        if out.exit_code != 0 or slowest is None:
            why = f"{case.status}: {case.message}" if case and case.status else _tail(out)
            return _unknown(
                test,
                f"nvbandwidth -t {name} gave no reading (exit {out.exit_code}): {why}",
                version,
            )
        row, col, value = slowest
        where = (
            f"GPU {col}"
            if name == nvbw.H2D
            else f"GPU {row}"
            if name == nvbw.D2H
            else f"GPU {row}->{col}"
        )
        mins[name] = (value, where)
    host_floor, d2d_floor, source = nvbandwidth_floors(policy)
    host_name = min((nvbw.H2D, nvbw.D2H), key=lambda n: mins[n][0])
    figure, where = mins[host_name]
    detail = {f"{k.split('_memcpy')[0]}_min_gbps": f"{v:g}" for k, (v, _) in mins.items()}
    base = _reading(
        test,
        figure=figure,
        unit="GB/s",
        tool_version=version,
        detail=detail,
    )
    if nvbw.D2D in mins and d2d_floor is not None and mins[nvbw.D2D][0] < d2d_floor:
        value, pair = mins[nvbw.D2D]
        reason = f"{nvbw.D2D} {pair} {value:g} GB/s, below the floor {d2d_floor:g} GB/s ({source})"
        return _verdict(base, AcceptanceStatus.FAIL, reason, host_floor)
    return _versus_floor(base, f"{host_name} {where}", host_floor, source)


@_timed
def run_nccl_all_reduce(policy: AcceptancePolicy, host: ToolHost) -> AcceptanceResult:
    """Single-node NCCL ``all_reduce_perf`` over every GPU (-g N from nvidia-smi) at one
    message size (the baseline's, else 1 GiB).

    figure: the footer's ``# Avg bus bandwidth`` (GB/s; one size, so that size's), held to
    thresholds.nccl_floor. FAIL too when a result was wrong (#wrong or out-of-bounds
    values). UNKNOWN when all_reduce_perf is missing (put nccl-tests' build on PATH), times
    out, exits with an error (nccl-tests: 1-6) or prints no table. Exit 7 (nccl-tests'
    testNumResults: wrong results or below NCCL_TESTS_MIN_BW) is read from the table."""
    test = AcceptanceTest.NCCL_ALL_REDUCE
    log = _smi(test, policy, host)
    if isinstance(log, AcceptanceResult):
        return log
    if not log.gpus:
        return _unknown(test, "nvidia-smi lists no GPU to run all_reduce_perf on")
    published = baseline_for(policy)
    message = published.nccl_message_bytes if published is not None else DEFAULT_NCCL_MESSAGE_BYTES
    size = str(message)
    argv = ["all_reduce_perf", "-b", size, "-e", size, "-f", "2", "-g", str(len(log.gpus))]
    argv += ["-n", str(NCCL_ITERATIONS[policy.depth]), "-c", "1"]
    out, failed = _run(test, host, argv, policy)
    if failed is not None:
        return failed
    floor, source = nccl_floor(policy)
    return nccl_verdict(test, out, floor, source, {"message_bytes": size, "gpus": argv[8]})


def nccl_verdict(
    test: AcceptanceTest,
    out: ToolOutput,
    floor: float | None,
    source: str,
    detail: Mapping[str, str],
) -> AcceptanceResult:
    """The verdict of one all_reduce_perf run that finished (not missing, not timed out),
    single-node or across nodes: UNKNOWN for an exit other than 0 or 7 or output without
    its table; FAIL for any wrong result; else its bus bandwidth (the footer's average, or
    the largest size's lower half without a footer) against floor (GB/s; None: PASS with
    the figure, for the planner's relative check). source: where the floor comes from."""
    if out.exit_code not in (0, 7):
        return _unknown(test, f"all_reduce_perf exited {out.exit_code}: {_tail(out)}")
    try:
        parsed = parse_all_reduce_perf(out.stdout)
    except ValueError as exc:
        return _unknown(test, f"all_reduce_perf (exit {out.exit_code}): {exc}")
    figure = parsed.avg_busbw_gbps
    if figure is None:
        largest = max(r.size_bytes for r in parsed.rows)
        figure = min(r.busbw_gbps for r in parsed.rows if r.size_bytes == largest)
    base = _reading(
        test,
        figure=figure,
        unit="GB/s",
        tool_version=parsed.version,
        detail={**detail, "wrong": str(parsed.wrong)},
    )
    if parsed.wrong:
        reason = f"all_reduce_perf found {parsed.wrong} wrong results (data corruption)"
        return _verdict(base, AcceptanceStatus.FAIL, reason, floor)
    return _versus_floor(base, "all_reduce_perf bus bandwidth", floor, source)


#: The node's acceptance tests in run order: reads first, then the tests that load the GPUs,
#: then the PCIe links (read right after the load, see run_pcie_link). Multi-node NCCL
#: runs from the reconciler's side (it needs a peer), not here.
TOOL_TESTS: Mapping[AcceptanceTest, TestFn] = {
    AcceptanceTest.GPU_COUNT: run_gpu_count,
    AcceptanceTest.GPU_MEMORY: run_gpu_memory,
    AcceptanceTest.ECC_MODE: run_ecc_mode,
    AcceptanceTest.PERSISTENCE_MODE: run_persistence_mode,
    AcceptanceTest.IB_PORTS: run_ib_ports,
    AcceptanceTest.VERSIONS: run_versions,
    AcceptanceTest.DCGM_DIAG: run_dcgm_diag,
    AcceptanceTest.NVBANDWIDTH: run_nvbandwidth,
    AcceptanceTest.NCCL_ALL_REDUCE: run_nccl_all_reduce,
    AcceptanceTest.PCIE_LINK: run_pcie_link,
}


def run_tool_tests(policy: AcceptancePolicy, host: ToolHost) -> tuple[AcceptanceResult, ...]:
    """Every test of TOOL_TESTS in order, one result each. A test that raises (a bug, or a
    host that fails in a way the test did not expect) gives UNKNOWN with the exception's
    type and message; the rest still run."""
    results = []
    for test, fn in TOOL_TESTS.items():
        try:
            results.append(fn(policy, host))
        except Exception as exc:  # one broken test must not hide the others' verdicts
            results.append(_unknown(test, f"{type(exc).__name__}: {exc}"))
    return tuple(results)
