"""Read NVIDIA nvbandwidth's text output: one bandwidth matrix and SUM line per testcase.

Format (NVIDIA/nvbandwidth v0.8, ``inline_common.h`` operator<< and ``output.cpp``; a
verbatim sample in nvbandwidth issue #42)::

    nvbandwidth Version: v0.8
    ...
    Driver Version: 560.35.05

    Running host_to_device_memcpy_ce.
    memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
               0         1
     0     55.12     55.30

    SUM host_to_device_memcpy_ce 110.42

A title line ``memcpy CE|SM <ROW>(row) ->|<-|<-> <COL>(column) bandwidth (GB/s)``, a header
row of column indexes, one row per row index (host rows: a single row 0), cells with two
decimals, ``N/A`` (v0.8) or ``0.00`` (older) on the diagonal and where peers have no access.
A testcase that cannot run prints ``Waived``/``Error``/``Not Found`` lines instead of a
matrix. Figures are GB/s (nvbandwidth's own unit).

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "D2D",
    "D2H",
    "H2D",
    "NvbandwidthCase",
    "NvbandwidthOutput",
    "parse_nvbandwidth",
]

#: The testcases the acceptance suite runs (nvbandwidth ``testcase.h`` names).
H2D = "host_to_device_memcpy_ce"
D2H = "device_to_host_memcpy_ce"
D2D = "device_to_device_memcpy_read_ce"

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)", re.MULTILINE)
_RUNNING = re.compile(r"^Running (\S+?)\.?\s*$")
_TITLE = re.compile(r"^memcpy (CE|SM) .*bandwidth \(GB/s\)\s*$")
_SUM = re.compile(r"^SUM (\S+) ([0-9.]+)\s*$")
_STATUS = re.compile(r"^(Waived|Error|Not Found)\b:?\s*(.*)$")


@dataclass(frozen=True)
class NvbandwidthCase:
    """One testcase: its matrix (row index -> column index -> GB/s; N/A cells left out),
    its SUM line in GB/s (None when absent) and the status nvbandwidth gave when it printed
    no matrix ("Waived", "Error", "Not Found"; "" when it ran)."""

    name: str
    cells: tuple[tuple[int, int, float], ...] = ()
    sum_gbps: float | None = None
    status: str = ""
    message: str = ""

    @property
    def min_gbps(self) -> float | None:
        """The lowest cell (the slowest GPU or GPU pair), or None without a cell. A 0.00
        cell on the diagonal (older versions print it there) is not a reading."""
        values = [v for r, c, v in self.cells if not (r == c and v == 0.0 and self.peer)]
        return min(values) if values else None

    @property
    def peer(self) -> bool:
        """True for device-to-device testcases (the matrix is GPU x GPU)."""
        return self.name.startswith("device_to_device")

    def slowest(self) -> tuple[int, int, float] | None:
        """(row, column, GB/s) of the lowest reading, or None."""
        low = self.min_gbps
        if low is None:
            return None
        return next(cell for cell in self.cells if cell[2] == low)


@dataclass(frozen=True)
class NvbandwidthOutput:
    """A parsed run: nvbandwidth's version ("" when not printed) and its testcases by name."""

    version: str
    cases: dict[str, NvbandwidthCase]


def _cells(lines: list[str]) -> tuple[tuple[int, int, float], ...]:
    """The matrix under a title: header of column indexes, then `row v v v ...` lines."""
    if not lines:
        return ()
    columns = [int(tok) for tok in lines[0].split() if tok.isdigit()]
    out: list[tuple[int, int, float]] = []
    for line in lines[1:]:
        toks = line.split()
        if not toks or not toks[0].isdigit():
            break
        row = int(toks[0])
        for i, tok in enumerate(toks[1 : len(columns) + 1]):
            if tok != "N/A":
                out.append((row, columns[i], float(tok)))
    return tuple(out)


def parse_nvbandwidth(stdout: str) -> NvbandwidthOutput:
    """Parse nvbandwidth's text output (see the module docstring).

    Returns every testcase it printed, by name. Raises ValueError when the text holds no
    testcase at all or a matrix cell is not a number (not nvbandwidth's output, or a format
    this parser does not know: the caller reports ``unknown``, never a pass).
    """
    version = _VERSION.search(stdout)
    cases: dict[str, NvbandwidthCase] = {}
    lines = stdout.splitlines()
    current = ""
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        running = _RUNNING.match(line)
        status = _STATUS.match(line)
        summed = _SUM.match(line)
        if running:
            current = running[1]
            cases[current] = NvbandwidthCase(current)
        elif status and current:
            cases[current] = NvbandwidthCase(current, status=status[1], message=status[2])
        elif _TITLE.match(line) and current:
            block: list[str] = []
            j = i + 1
            while j < len(lines) and lines[j].strip():
                block.append(lines[j])
                j += 1
            try:
                cells = _cells(block)
            except ValueError as exc:
                raise ValueError(f"{current}: a matrix cell is not a number ({exc})") from None
            cases[current] = NvbandwidthCase(current, cells)
            i = j
            continue
        elif summed:
            name = summed[1]
            prior = cases.get(name, NvbandwidthCase(name))
            cases[name] = NvbandwidthCase(
                name, prior.cells, float(summed[2]), prior.status, prior.message
            )
        i += 1
    if not cases:
        raise ValueError("no nvbandwidth testcase in the output")
    return NvbandwidthOutput(version[1] if version else "", cases)
