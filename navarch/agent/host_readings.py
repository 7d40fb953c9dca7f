"""Host readings besides the kernel log: PCIe AER counters from sysfs and the clock's state.

- ``read_aer_counters``: per PCI device, the totals of
  ``/sys/bus/pci/devices/<dev>/aer_dev_correctable``, ``aer_dev_fatal`` and
  ``aer_dev_nonfatal`` (Linux Documentation/ABI/testing/sysfs-bus-pci-devices-aer-stats:
  one ``<name> <count>`` per line, ending with ``TOTAL_ERR_COR``, ``TOTAL_ERR_FATAL`` or
  ``TOTAL_ERR_NONFATAL``; cumulative since boot). The sysfs root is a parameter, so tests
  and the fake backend read a fixture tree.
- ``read_clock``: ``adjtimex(2)`` with ``modes = 0`` (read only): the clock is unsynchronised
  when the kernel's time status has ``STA_UNSYNC`` or the call returns ``TIME_ERROR``
  (include/uapi/linux/timex.h; the EKS node monitoring agent's ClockUnsynchronized check,
  monitors/kernel/monitor.go ``checkClockSync``). The libc call sits behind a seam
  (``adjtimex``) so tests inject the answer; on a machine that is not Linux, or where the
  call fails, the reading is unknown (``synchronised`` None), never unhealthy.

Python 3.9-compatible like the rest of the agent (it ships to GPU nodes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AerCounts",
    "ClockReading",
    "HostReadings",
    "STA_UNSYNC",
    "TIME_ERROR",
    "read_aer_counters",
    "read_clock",
]

#: include/uapi/linux/timex.h: "clock unsynchronized" status bit and the error state.
STA_UNSYNC = 0x0040
TIME_ERROR = 5
_MAX_DEVICES = 512
_AER_FILES = (
    ("correctable", "aer_dev_correctable", "TOTAL_ERR_COR"),
    ("fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"),
    ("nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
)


@dataclass(frozen=True)
class AerCounts:
    """One PCI device's AER totals since boot (None: that file was absent or unreadable).

    device: the sysfs directory name, a PCI address such as ``0000:3b:00.0``."""

    device: str
    correctable: int | None = None
    fatal: int | None = None
    nonfatal: int | None = None


@dataclass(frozen=True)
class ClockReading:
    """The system clock's synchronisation: True, False, or None (unknown: not Linux, the
    call failed, or not read); status: the timex status bits; state: adjtimex's return
    (TIME_OK 0 ... TIME_ERROR 5); detail: why it is unknown, or what was read; read: False
    when nobody asked (the fake backend and the simulator: the machine's own clock is not
    the simulated node's)."""

    synchronised: bool | None
    status: int | None = None
    state: int | None = None
    detail: str = ""
    read: bool = True


@dataclass(frozen=True)
class HostReadings:
    """What the node's host says outside its kernel log for one run.

    aer: every PCI device with AER counters, or None when sysfs was not read (aer_error
    says why when reading failed); clock: the clock's synchronisation."""

    aer: tuple[AerCounts, ...] | None = None
    aer_error: str | None = None
    clock: ClockReading = ClockReading(None, detail="not read", read=False)


def _total(path: Path, key: str) -> int | None:
    """The ``key <count>`` line of one AER stats file, or None when absent or malformed."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines()[:64]:
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


def read_aer_counters(sysfs_root: str | os.PathLike[str]) -> tuple[AerCounts, ...]:
    """AER totals of every device under ``<sysfs_root>/bus/pci/devices`` that has them,
    sorted by device (at most 512). Devices without any AER file are left out. Raises
    OSError when the devices directory cannot be listed."""
    devices = Path(sysfs_root) / "bus" / "pci" / "devices"
    out: list[AerCounts] = []
    for entry in sorted(os.listdir(devices))[:_MAX_DEVICES]:
        values = {field: _total(devices / entry / name, key) for field, name, key in _AER_FILES}
        if any(v is not None for v in values.values()):
            out.append(AerCounts(entry, **values))
    return tuple(out)


class _Timex(ctypes.Structure):
    """struct timex (include/uapi/linux/timex.h) for the C ABI of 64-bit Linux, with
    spare room at the end so a larger kernel struct never writes past it."""

    _fields_ = [  # noqa: RUF012 (ctypes reads this class attribute)
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_spare", ctypes.c_int * 32),
    ]


def libc_adjtimex() -> tuple[int, int]:
    """``adjtimex(&tx)`` with ``tx.modes = 0`` through libc: (return value, tx.status).
    Raises OSError when libc or the call fails."""
    name = ctypes.util.find_library("c") or "libc.so.6"
    libc = ctypes.CDLL(name, use_errno=True)
    tx = _Timex()
    state = int(libc.adjtimex(ctypes.byref(tx)))
    if state < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"adjtimex failed: {os.strerror(err)}")
    return state, int(tx.status)


def read_clock(
    adjtimex: Callable[[], tuple[int, int]] | None = None, platform: str | None = None
) -> ClockReading:
    """The clock's synchronisation from ``adjtimex`` ((return value, status bits); default:
    this module's ``libc_adjtimex``, looked up at call time so tests can replace it) on
    ``platform`` (default: sys.platform).

    Unsynchronised: ``status & STA_UNSYNC`` or the return is ``TIME_ERROR`` (the kernel
    sets both when no time daemon disciplines the clock). Unknown (None), never an error:
    a platform other than Linux, or adjtimex raising OSError."""
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return ClockReading(None, detail=f"adjtimex is Linux only (platform {platform})")
    try:
        state, status = (adjtimex or libc_adjtimex)()
    except OSError as exc:
        return ClockReading(None, detail=f"adjtimex unavailable: {exc}")
    unsynced = bool(status & STA_UNSYNC) or state == TIME_ERROR
    detail = f"adjtimex state {state}, status 0x{status:04x}"
    return ClockReading(not unsynced, status, state, detail)
