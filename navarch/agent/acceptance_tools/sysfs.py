"""Read the kernel's sysfs for the inventory tests: GPU PCIe links, InfiniBand/EFA ports and
NIC firmware.

- PCIe (Linux ``Documentation/ABI/testing/sysfs-bus-pci``): under
  ``/sys/bus/pci/devices/<address>/``, ``vendor`` ("0x10de" for NVIDIA), ``class``
  ("0x030200" 3D controller, "0x030000" VGA), ``current_link_speed`` / ``max_link_speed``
  ("16.0 GT/s PCIe"; older kernels "16 GT/s") and ``current_link_width`` /
  ``max_link_width`` ("16"). Transfer rate to generation: 2.5, 5, 8, 16, 32, 64 GT/s are
  Gen1 to Gen6 (PCI-SIG base specifications).
- InfiniBand and EFA (Linux IB core, ``Documentation/ABI/stable/sysfs-class-infiniband``):
  ``/sys/class/infiniband/<hca>/ports/<n>/state`` ("4: ACTIVE"), ``rate``
  ("400 Gb/sec (4X NDR)"), ``link_layer`` ("InfiniBand" or "Ethernet"), and the HCA's
  ``fw_ver`` ("28.39.1002"). On EFA the state reads ACTIVE whatever the link does (public EFA test
  harnesses model it so): there the device count is the signal.

Every reader takes a ToolHost, so tests and the local provider hand it a fake tree.
Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from navarch.agent.acceptance_tools.host import ToolHost

__all__ = [
    "IbPort",
    "PcieLink",
    "gpu_pcie_links",
    "ib_ports",
    "nic_firmware",
    "pcie_gen_of",
]

PCI_DEVICES = "/sys/bus/pci/devices"
INFINIBAND = "/sys/class/infiniband"
_NVIDIA_VENDOR = "0x10de"
_DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA, 3D controller (PCI code and ID assignment)
_GT_S = re.compile(r"^\s*([0-9.]+)\s*GT/s")
_GEN_BY_GT_S = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\w+)")
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


@dataclass(frozen=True)
class PcieLink:
    """One GPU's PCIe link: its address, generation and lanes, current and maximum
    (None where sysfs gave nothing readable)."""

    address: str
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None


@dataclass(frozen=True)
class IbPort:
    """One InfiniBand/EFA port: HCA name, port number, state word ("ACTIVE", "DOWN", ...;
    "" when unreadable), rate in Gb/s (None when unreadable) and link layer."""

    device: str
    port: int
    state: str
    rate_gbps: float | None
    link_layer: str


def pcie_gen_of(speed: str) -> int | None:
    """PCIe generation of a sysfs link speed ("32.0 GT/s PCIe" -> 5); None when unknown."""
    m = _GT_S.match(speed)
    return _GEN_BY_GT_S.get(float(m[1])) if m else None


def _read(host: ToolHost, path: str) -> str:
    try:
        return host.read_text(path).strip()
    except OSError:
        return ""


def _lanes(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def gpu_pcie_links(host: ToolHost) -> tuple[PcieLink, ...]:
    """The PCIe links of every NVIDIA display/3D device, by address.

    Raises OSError when /sys/bus/pci/devices cannot be listed."""
    links = []
    for address in host.list_dir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{address}/"
        if _read(host, base + "vendor").lower() != _NVIDIA_VENDOR:
            continue
        if not _read(host, base + "class").lower().startswith(_DISPLAY_CLASSES):
            continue
        links.append(
            PcieLink(
                address,
                pcie_gen_of(_read(host, base + "current_link_speed")),
                pcie_gen_of(_read(host, base + "max_link_speed")),
                _lanes(_read(host, base + "current_link_width")),
                _lanes(_read(host, base + "max_link_width")),
            )
        )
    return tuple(links)


def ib_ports(host: ToolHost) -> tuple[IbPort, ...]:
    """Every port of every InfiniBand/EFA device; () when the node has no
    /sys/class/infiniband (no RDMA driver loaded)."""
    try:
        devices = host.list_dir(INFINIBAND)
    except OSError:
        return ()
    out = []
    for device in devices:
        try:
            ports = host.list_dir(f"{INFINIBAND}/{device}/ports")
        except OSError:
            continue
        for port in ports:
            if not port.isdigit():
                continue
            base = f"{INFINIBAND}/{device}/ports/{port}/"
            state = _STATE.match(_read(host, base + "state"))
            rate = _RATE.match(_read(host, base + "rate"))
            out.append(
                IbPort(
                    device,
                    int(port),
                    state[2].upper() if state else "",
                    float(rate[1]) if rate else None,
                    _read(host, base + "link_layer"),
                )
            )
    return tuple(out)


def nic_firmware(host: ToolHost) -> dict[str, str]:
    """HCA name -> firmware version (``fw_ver``) for every InfiniBand/EFA device that has
    one; {} when none is readable."""
    try:
        devices = host.list_dir(INFINIBAND)
    except OSError:
        return {}
    found = {d: _read(host, f"{INFINIBAND}/{d}/fw_ver") for d in devices}
    return {d: v for d, v in found.items() if v}
