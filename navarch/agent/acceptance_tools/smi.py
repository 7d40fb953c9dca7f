"""Read ``nvidia-smi -q -x`` (the XML log, ``nvsmi_device_v12.dtd``) for the inventory and
version tests: GPU count, memory per GPU, ECC and persistence mode, driver, CUDA, VBIOS and
InfoROM versions, PCIe link generation and width as the driver sees them.

Element names as nvidia-smi writes them (a real 2-GPU L4 log of driver 555.42.06 is
abridged in tests/fixtures/acceptance/)::

    <nvidia_smi_log>
      <driver_version>555.42.06</driver_version> <cuda_version>12.5</cuda_version>
      <attached_gpus>2</attached_gpus>
      <gpu id="00000000:01:00.0">
        <product_name>NVIDIA L4</product_name> <persistence_mode>Disabled</persistence_mode>
        <vbios_version>95.04.29.00.06</vbios_version>
        <inforom_version><img_version>G193.0200.00.01</img_version>...</inforom_version>
        <pci><pci_gpu_link_info><pcie_gen><max_link_gen>4</max_link_gen>
             <current_link_gen>4</current_link_gen>...</pcie_gen>
             <link_widths><max_link_width>16x</max_link_width>
             <current_link_width>16x</current_link_width></link_widths>...</pci>
        <fb_memory_usage><total>23034 MiB</total>...</fb_memory_usage>
        <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>

The document comes from the node's own driver; it is parsed with the standard library's
expat (which has refused entity expansion bombs since expat 2.4.0) and the DOCTYPE's
external DTD is never fetched.

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

__all__ = ["SmiGpu", "SmiLog", "parse_nvidia_smi_xml"]

_MIB = 1024 * 1024
_MEMORY = re.compile(r"^\s*(\d+)\s*MiB\s*$")
_WIDTH = re.compile(r"^\s*(\d+)x\s*$")


@dataclass(frozen=True)
class SmiGpu:
    """One GPU's readings; None where nvidia-smi printed N/A or left the element out.

    memory_total_bytes: framebuffer total (nvidia-smi's MiB x 1 MiB); ecc_enabled /
    ecc_pending_enabled: current and pending ECC mode; pcie_*: generation and lanes."""

    pci_bus_id: str
    name: str
    memory_total_bytes: int | None
    ecc_enabled: bool | None
    ecc_pending_enabled: bool | None
    persistence_enabled: bool | None
    vbios: str
    inforom: str
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None


@dataclass(frozen=True)
class SmiLog:
    """The whole log: driver and CUDA versions ("" when absent) and the GPUs in order."""

    driver: str
    cuda: str
    attached_gpus: int
    gpus: tuple[SmiGpu, ...]


def _text(node: ET.Element, path: str) -> str:
    found = node.find(path)
    text = (found.text or "").strip() if found is not None else ""
    return "" if text == "N/A" else text


def _int(text: str, pattern: re.Pattern[str] | None = None) -> int | None:
    if pattern is not None:
        m = pattern.match(text)
        text = m[1] if m else ""
    return int(text) if text.isdigit() else None


def _mode(text: str) -> bool | None:
    return {"enabled": True, "disabled": False}.get(text.lower())


def _gpu(node: ET.Element) -> SmiGpu:
    memory = _int(_text(node, "fb_memory_usage/total"), _MEMORY)
    link = "pci/pci_gpu_link_info/"
    return SmiGpu(
        pci_bus_id=node.get("id", ""),
        name=_text(node, "product_name"),
        memory_total_bytes=None if memory is None else memory * _MIB,
        ecc_enabled=_mode(_text(node, "ecc_mode/current_ecc")),
        ecc_pending_enabled=_mode(_text(node, "ecc_mode/pending_ecc")),
        persistence_enabled=_mode(_text(node, "persistence_mode")),
        vbios=_text(node, "vbios_version"),
        inforom=_text(node, "inforom_version/img_version"),
        pcie_gen_current=_int(_text(node, link + "pcie_gen/current_link_gen")),
        pcie_gen_max=_int(_text(node, link + "pcie_gen/max_link_gen")),
        pcie_width_current=_int(_text(node, link + "link_widths/current_link_width"), _WIDTH),
        pcie_width_max=_int(_text(node, link + "link_widths/max_link_width"), _WIDTH),
    )


def parse_nvidia_smi_xml(stdout: str) -> SmiLog:
    """Parse ``nvidia-smi -q -x`` output (see the module docstring).

    Raises ValueError when it is not XML or its root is not ``nvidia_smi_log`` (the caller
    reports ``unknown``, never a pass).
    """
    start = stdout.find("<nvidia_smi_log")
    if start < 0:
        raise ValueError("no <nvidia_smi_log> element in the output")
    try:
        root = ET.fromstring(stdout[start:])
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi XML does not parse: {exc}") from None
    gpus = tuple(_gpu(g) for g in root.findall("gpu"))
    attached = _int(_text(root, "attached_gpus"))
    return SmiLog(
        driver=_text(root, "driver_version"),
        cuda=_text(root, "cuda_version"),
        attached_gpus=len(gpus) if attached is None else attached,
        gpus=gpus,
    )
