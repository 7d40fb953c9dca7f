"""Read NVIDIA nccl-tests ``all_reduce_perf`` text output: the result table and its footer.

Format (NVIDIA/nccl-tests 2.19.6, ``src/util.cu`` writeResultHeader / writeResultFooter;
footer verbatim in ROCm/rccl PR #2075)::

    # nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
    # Collective test starting: all_reduce_perf
    ...
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
      1073741824     268435456     float     sum      -1   4412.3  243.35  425.86      0   4398.1  244.14  427.24      0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 426.55
    #
    # Collective test concluded: all_reduce_perf

Columns are read by the header's names, because versions differ: up to 2.13 there is no
``root`` column and ``error`` stands where ``#wrong`` is (a real p4dn table in NVIDIA/nccl
issue #527), and ``-I 1``/``-S 1`` add columns. The first half of the row is out-of-place,
the second in-place. ``# Avg bus bandwidth`` is the mean busbw over every size run (the
suite runs one size, so it is that size's figure). Figures are GB/s.

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NcclRow", "NcclOutput", "parse_all_reduce_perf"]

_VERSION = re.compile(r"^# nccl-tests version (\S+)", re.MULTILINE)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.MULTILINE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class NcclRow:
    """One message size: bytes, out-of-place and in-place busbw (GB/s) and wrong results
    (None where the version prints an error magnitude instead of a count)."""

    size_bytes: int
    busbw_oop_gbps: float
    busbw_ip_gbps: float
    wrong_oop: int | None
    wrong_ip: int | None

    @property
    def busbw_gbps(self) -> float:
        """The lower of the two halves: the figure a job can count on."""
        return min(self.busbw_oop_gbps, self.busbw_ip_gbps)


@dataclass(frozen=True)
class NcclOutput:
    """A parsed run: nccl-tests' version ("" when not printed), the rows, the footer's
    average bus bandwidth in GB/s (None when absent) and out-of-bounds count (None when
    absent)."""

    version: str
    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None

    @property
    def wrong(self) -> int:
        """Results that failed validation: #wrong of every row plus out-of-bounds values."""
        counts = [n for r in self.rows for n in (r.wrong_oop, r.wrong_ip) if n]
        return sum(counts) + (self.out_of_bounds or 0)


def _header(line: str) -> list[str] | None:
    names = line.lstrip("#").split()
    return names if "size" in names and names.count("busbw") == 2 else None


def parse_all_reduce_perf(stdout: str) -> NcclOutput:
    """Parse all_reduce_perf's text output (see the module docstring).

    Raises ValueError when no header with two busbw columns or no data row is found, or
    a row does not fit the header (not nccl-tests' output, or a run that failed before its
    table: the caller reports ``unknown``, never a pass).
    """
    header: list[str] | None = None
    rows: list[NcclRow] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            header = header or _header(line)
            continue
        if header is None or not line or not line.split()[0].isdigit():
            continue
        toks = line.split()
        if len(toks) < len(header):
            raise ValueError(f"a row has {len(toks)} columns, the header {len(header)}: {line}")
        bus = [i for i, n in enumerate(header) if n == "busbw"]
        wrong_col = next((n for n in ("#wrong", "error") if n in header), "")
        wrong = [i for i, n in enumerate(header) if n == wrong_col]
        counts = [int(toks[i]) if toks[i].isdigit() else None for i in wrong]
        counts += [None] * (2 - len(counts))
        try:
            rows.append(
                NcclRow(
                    int(toks[header.index("size")]),
                    float(toks[bus[0]]),
                    float(toks[bus[1]]),
                    counts[0],
                    counts[1],
                )
            )
        except ValueError:
            raise ValueError(f"a row's figures are not numbers: {line}") from None
    if header is None:
        raise ValueError("no all_reduce_perf table header (size ... busbw ... busbw)")
    if not rows:
        raise ValueError("no all_reduce_perf result row")
    version = _VERSION.search(stdout)
    avg = _AVG.search(stdout)
    oob = _OOB.search(stdout)
    return NcclOutput(
        version[1] if version else "",
        tuple(rows),
        float(avg[1]) if avg else None,
        int(oob[1]) if oob else None,
    )
