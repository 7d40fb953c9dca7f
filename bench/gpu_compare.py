"""What navarch reads on a real GPU machine, beside nvidia-smi's own value, with a verdict.

    python bench/gpu_compare.py --report report.json --smi smi.xml \
        [--dcgmi dcgmi.json --dcgmi-exit N] [--nvbandwidth nvbw.txt] [--nccl nccl.txt]

bench/on_gpu.sh runs the tools and this module compares what they wrote. Inputs:

- ``--report``: one agent report (``navarch-agent.pyz run --once --stdout``), read from
  the real NVML and kernel log;
- ``--smi``: ``nvidia-smi -q -x`` of the same machine a moment later;
- ``--dcgmi``, ``--nvbandwidth``, ``--nccl``: the outputs of ``dcgmi diag -r 1 -j``,
  ``nvbandwidth -t host_to_device_memcpy_ce`` and ``all_reduce_perf -g 1``, each read by
  the parser the agent ships (navarch.agent.acceptance_tools), absent when not installed.

Each row is (what, navarch's reading, nvidia-smi's value, verdict). Verdicts: ``ok`` (they
agree, within the row's tolerance), ``DIFFERS``, ``FAULT`` (the tool or the agent names a
fault), ``not read`` (one side has no reading: never counted as agreement). Tolerances,
because the two reads are seconds apart on a live GPU: temperature 3 C; power the larger
of 15 W and 15 %; memory total 1 MiB; identities (count, name, bus, UUID, driver) exactly.
A host-to-device copy is ``ok`` at 60 % or more of the link's theoretical rate (assumption:
a healthy Gen4/Gen5 x16 link moves 75-90 % of it with copy engines, NVIDIA nvbandwidth
README figures for H100 ~55 of 64 GB/s; 60 % leaves room for a VM's IOMMU).

Exit code of ``main``: 0 when every row is ok (or not read for a tool not installed), 1
when a row DIFFERS, is a FAULT, or a reading navarch should have made is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from navarch.agent.acceptance_tools.dcgm import DiagOutcome, parse_dcgmi_diag
from navarch.agent.acceptance_tools.nccl import parse_all_reduce_perf
from navarch.agent.acceptance_tools.nvbandwidth import parse_nvbandwidth
from navarch.agent.acceptance_tools.smi import SmiGpu, parse_nvidia_smi_xml
from navarch.agent.kernel_log import normalise_bdf

MIB = 1024 * 1024
TEMPERATURE_TOLERANCE_C = 3.0
POWER_TOLERANCE_W = 15.0
POWER_TOLERANCE_FRACTION = 0.15
H2D_FRACTION_OK = 0.60
#: PCIe transfer rate per lane (GT/s) and line-code efficiency by generation (PCI-SIG).
_PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_NUMBER = re.compile(r"^\s*([0-9.]+)")


class Verdict(Enum):
    """One row's verdict (module docstring)."""

    OK = "ok"
    DIFFERS = "DIFFERS"
    FAULT = "FAULT"
    NOT_READ = "not read"


@dataclass(frozen=True)
class Row:
    """One line of the table: what is compared, both values as text, the verdict.
    required: a NOT_READ verdict fails the run (navarch should have read it)."""

    what: str
    navarch: str
    nvidia_smi: str
    verdict: Verdict
    required: bool = True


def _num(text: str) -> float | None:
    m = _NUMBER.match(text or "")
    return float(m[1]) if m else None


def _smi_text(gpu: ET.Element, *paths: str) -> str:
    """The first of `paths` nvidia-smi filled (N/A and absent count as unfilled)."""
    for path in paths:
        node = gpu.find(path)
        text = (node.text or "").strip() if node is not None else ""
        if text and text != "N/A":
            return text
    return ""


def _exact(what: str, ours: Any, theirs: Any) -> Row:
    if ours in (None, "") or theirs in (None, ""):
        return Row(what, str(ours or "-"), str(theirs or "-"), Verdict.NOT_READ)
    verdict = Verdict.OK if ours == theirs else Verdict.DIFFERS
    return Row(what, str(ours), str(theirs), verdict)


def _near(what: str, ours: float | None, theirs: float | None, tol: float, unit: str) -> Row:
    if ours is None or theirs is None:
        shown = (
            "-" if ours is None else f"{ours:g} {unit}",
            "-" if theirs is None else f"{theirs:g} {unit}",
        )
        return Row(what, shown[0], shown[1], Verdict.NOT_READ)
    verdict = Verdict.OK if abs(ours - theirs) <= tol else Verdict.DIFFERS
    return Row(what, f"{ours:g} {unit}", f"{theirs:g} {unit}", verdict)


def _gpu_rows(reading: Mapping[str, Any], smi: SmiGpu, node: ET.Element) -> list[Row]:
    """Per GPU: identity exactly, readings within tolerance."""
    i = reading.get("index")
    temp = _num(_smi_text(node, "temperature/gpu_temp"))
    power = _num(
        _smi_text(
            node,
            "gpu_power_readings/power_draw",
            "gpu_power_readings/instant_power_draw",
            "power_readings/power_draw",
        )
    )
    ours_power = reading.get("power_w")
    power_tol = max(POWER_TOLERANCE_W, POWER_TOLERANCE_FRACTION * (power or 0.0))
    ours_mem = reading.get("memory_total_bytes")
    return [
        _exact(f"GPU {i} name", reading.get("name"), smi.name),
        _exact(
            f"GPU {i} PCI bus",
            reading.get("pci_bus_id"),
            normalise_bdf(smi.pci_bus_id) if smi.pci_bus_id else "",
        ),
        _exact(f"GPU {i} UUID", reading.get("uuid"), _smi_text(node, "uuid")),
        _near(
            f"GPU {i} temperature", reading.get("temperature_c"), temp, TEMPERATURE_TOLERANCE_C, "C"
        ),
        _near(f"GPU {i} power", ours_power, power, power_tol, "W"),
        _near(
            f"GPU {i} memory total",
            None if ours_mem is None else ours_mem / MIB,
            None if smi.memory_total_bytes is None else smi.memory_total_bytes / MIB,
            1.0,
            "MiB",
        ),
    ]


def _check(report: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next((c for c in report.get("checks", ()) if c.get("name") == name), {})


def report_rows(report: Mapping[str, Any], smi_xml: str) -> list[Row]:
    """The agent report against nvidia-smi: GPU count, driver, per-GPU identity and
    readings, then the agent's own verdict and kernel-log source (nothing to compare:
    ``ok`` when healthy / read, ``FAULT`` naming the findings otherwise)."""
    smi = parse_nvidia_smi_xml(smi_xml)
    root = ET.fromstring(smi_xml[smi_xml.find("<nvidia_smi_log") :])
    nodes = {normalise_bdf(g.get("id", "")): g for g in root.findall("gpu")}
    by_bus = {normalise_bdf(g.pci_bus_id): g for g in smi.gpus}
    gpus = list(report.get("gpus", ()))
    nvml = _check(report, "nvml")
    rows = [
        _exact("GPU count", len(gpus), smi.attached_gpus),
        _exact("driver version", (nvml.get("evidence") or {}).get("driver_version"), smi.driver),
    ]
    for reading in gpus:
        bus = str(reading.get("pci_bus_id") or "")
        if bus not in by_bus:
            rows.append(Row(f"GPU {reading.get('index')} ({bus})", "read", "-", Verdict.DIFFERS))
            continue
        rows += _gpu_rows(reading, by_bus[bus], nodes[bus])
    faults = [c for c in report.get("checks", ()) if c.get("status") not in ("healthy", None)]
    status = str(report.get("status", "-"))
    rows.append(
        Row(
            "agent verdict",
            status
            if not faults
            else f"{status}: "
            + "; ".join(f"{c['name']}: {c['message']}"[:120] for c in faults[:3]),
            "-",
            Verdict.OK if status == "healthy" else Verdict.FAULT,
        )
    )
    klog = _check(report, "kernel_log")
    source = str((klog.get("evidence") or {}).get("source", "-"))
    rows.append(
        Row(
            "kernel log read",
            f"{source}: {klog.get('message', '-')}",
            "-",
            Verdict.OK if klog.get("status") == "healthy" else Verdict.NOT_READ,
        )
    )
    return rows


def link_gbps(gen: int | None, width: int | None) -> float | None:
    """A PCIe link's theoretical rate in GB/s per direction: GT/s x lanes x line code / 8
    (8b/10b for generations 1-2, 128b/130b from 3; PCI-SIG base specifications)."""
    if gen not in _PCIE_GTS or not width:
        return None
    code = 0.8 if gen <= 2 else 128 / 130
    return _PCIE_GTS[gen] * width * code / 8


def _dcgmi_row(dcgmi: str, exit_code: int | None) -> Row:
    diag = parse_dcgmi_diag(dcgmi, level=1, exit_code=exit_code)
    failed = ", ".join(t.name for t in diag.failed)
    verdict = {DiagOutcome.PASS: Verdict.OK, DiagOutcome.FAIL: Verdict.FAULT}.get(
        diag.outcome, Verdict.NOT_READ
    )
    return Row(
        "dcgmi diag -r 1", diag.outcome.value + (f": {failed}" if failed else ""), "-", verdict
    )


def _h2d_rows(nvbandwidth: str, gpus: Sequence[SmiGpu]) -> list[Row]:
    """Per GPU, the host-to-device copy against the link's rate (max generation and width)."""
    try:
        cases = parse_nvbandwidth(nvbandwidth).cases
    except ValueError as exc:  # a run that printed no table: no reading, not a pass
        return [Row("nvbandwidth h2d", f"no reading: {exc}", "-", Verdict.NOT_READ)]
    name = next((n for n in sorted(cases) if n.startswith("host_to_device_memcpy")), "")
    case = cases.get(name)
    cells = {col: v for _, col, v in case.cells} if case else {}
    rows: list[Row] = []
    for i, gpu in enumerate(gpus):
        link = link_gbps(gpu.pcie_gen_max, gpu.pcie_width_max)
        ours = cells.get(i)
        theirs = f"Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}: {link:.1f} GB/s" if link else "-"
        if ours is None or link is None:
            shown = "-" if ours is None else f"{ours:g} GB/s"
            rows.append(Row(f"GPU {i} h2d copy", shown, theirs, Verdict.NOT_READ))
            continue
        verdict = Verdict.OK if ours >= H2D_FRACTION_OK * link else Verdict.DIFFERS
        rows.append(Row(f"GPU {i} h2d copy", f"{ours:g} GB/s ({ours / link:.0%})", theirs, verdict))
    return rows


def _nccl_row(nccl: str) -> Row:
    try:
        out = parse_all_reduce_perf(nccl)
    except ValueError as exc:
        return Row("all_reduce_perf -g 1", f"no reading: {exc}", "-", Verdict.NOT_READ)
    verdict = Verdict.OK if out.wrong == 0 else Verdict.FAULT
    return Row("all_reduce_perf -g 1", f"{len(out.rows)} sizes, {out.wrong} wrong", "-", verdict)


def tool_rows(
    smi_xml: str,
    *,
    dcgmi: str | None = None,
    dcgmi_exit: int | None = 0,
    nvbandwidth: str | None = None,
    nccl: str | None = None,
) -> list[Row]:
    """The tools' readings through the agent's parsers: dcgmi diag -r 1's verdict,
    nvbandwidth's host-to-device copy per GPU beside the link nvidia-smi reports (max
    generation, max width), all_reduce_perf -g 1's wrong results. A tool given as None
    (not installed) is one ``not read`` row that does not fail the run; output a parser
    cannot read is a ``not read`` row that does."""

    def absent(what: str) -> Row:
        return Row(what, "not installed", "-", Verdict.NOT_READ, required=False)

    rows = [absent("dcgmi diag -r 1") if dcgmi is None else _dcgmi_row(dcgmi, dcgmi_exit)]
    if nvbandwidth is None:
        rows.append(absent("nvbandwidth h2d"))
    else:
        rows += _h2d_rows(nvbandwidth, parse_nvidia_smi_xml(smi_xml).gpus)
    rows.append(absent("all_reduce_perf -g 1") if nccl is None else _nccl_row(nccl))
    return rows


def render(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width table (header, rule, one line per row) and a last line
    counting each verdict."""
    head = ("reading", "navarch", "nvidia-smi", "verdict")
    cells = [head] + [(r.what, r.navarch, r.nvidia_smi, r.verdict.value) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(4)).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    counts = {v: sum(r.verdict is v for r in rows) for v in Verdict}
    lines.append(", ".join(f"{n} {v.value}" for v, n in counts.items()))
    return "\n".join(lines) + "\n"


def failed(rows: Sequence[Row]) -> bool:
    """True when a row differs, names a fault, or a required reading is missing."""
    return any(
        r.verdict in (Verdict.DIFFERS, Verdict.FAULT)
        or (r.verdict is Verdict.NOT_READ and r.required)
        for r in rows
    )


def _read(path: str | None) -> str | None:
    return Path(path).read_text(errors="replace") if path else None


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for the files named on the command line; exit 1 when ``failed``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", required=True)
    parser.add_argument("--smi", required=True)
    parser.add_argument("--dcgmi")
    parser.add_argument("--dcgmi-exit", type=int, default=0)
    parser.add_argument("--nvbandwidth")
    parser.add_argument("--nccl")
    args = parser.parse_args(argv)
    smi_xml = Path(args.smi).read_text()
    rows = report_rows(json.loads(Path(args.report).read_text()), smi_xml)
    rows += tool_rows(
        smi_xml,
        dcgmi=_read(args.dcgmi),
        dcgmi_exit=args.dcgmi_exit,
        nvbandwidth=_read(args.nvbandwidth),
        nccl=_read(args.nccl),
    )
    sys.stdout.write(render(rows))
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
