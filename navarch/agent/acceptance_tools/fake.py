"""A node for the acceptance tools without GPUs: the local provider's and the tests'.

``FakeToolHost(overrides)`` answers ``nvidia-smi -q -x``, ``dcgmi diag``, ``nvbandwidth`` and
``all_reduce_perf`` in the real tools' output formats, and serves a sysfs tree (GPU PCIe
links, InfiniBand ports), so the real parsers and verdicts run on the local loop. It models
a healthy 8 x H100 80GB HBM3 node with 8 InfiniBand NDR ports; an override (from
``navarch local inject NODE --acceptance KEY=VALUE``) changes one reading:

==========================  ==============================================================
key                         value
==========================  ==============================================================
gpu_count                   GPUs the driver sees (e.g. 7)
gpu_memory_mib              framebuffer per GPU, MiB
ecc, persistence            enabled | disabled (every GPU)
driver, cuda, vbios,        the version strings nvidia-smi prints (vbios and inforom on
inforom, nic_firmware       GPU 0 only: one odd part, as in the field)
pcie_gen, pcie_width        GPU 0's current link generation and lanes (a down-trained link)
ib_ports                    InfiniBand ports present
ib_state, ib_rate_gbps      port 1 of the first HCA: state word (DOWN, INIT, ...) and rate
dcgm_diag                   pass | fail
nvbandwidth_h2d_gbps,       GPU 0's host-to-device / device-to-host copy bandwidth and the
nvbandwidth_d2h_gbps,       GPU 0 -> GPU 1 device-to-device bandwidth, GB/s
nvbandwidth_d2d_gbps
nccl_busbw_gbps             all_reduce_perf bus bandwidth, GB/s
tool_time_s                 seconds each tool run takes on the host's clock (``elapsed_s``;
                            default 0): the agent's per-tick budget counts them, so 30
                            spreads the suite over three ticks, as a real suite's minutes do
==========================  ==============================================================

A tool's key (dcgm_diag, nvbandwidth_*, nccl_busbw_gbps) also takes ``missing`` (exit 127),
``timeout`` or ``garbage`` (output no parser knows), so the ``unknown`` paths run too.
The texts are format strings over the layouts of the fixtures in tests/fixtures/acceptance/
(the bundle carries no jinja2). Shipped in the agent bundle: Python 3.9, standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from string import Template

from navarch.agent.acceptance_tools.host import NOT_FOUND_EXIT, ToolOutput
from navarch.agent.acceptance_tools.sysfs import INFINIBAND, PCI_DEVICES

__all__ = ["DEFAULTS", "FAKE_KEYS", "TOOL_MODES", "FakeToolHost", "check_override"]

#: The healthy node: every key's value when not overridden.
DEFAULTS: Mapping[str, str] = {
    "gpu_count": "8",
    "gpu_memory_mib": "81559",
    "ecc": "enabled",
    "persistence": "enabled",
    "driver": "570.133.20",
    "cuda": "12.8",
    "vbios": "96.00.89.00.01",
    "inforom": "G520.0200.00.05",
    "nic_firmware": "28.39.1002",
    "pcie_gen": "5",
    "pcie_width": "16",
    "ib_ports": "8",
    "ib_state": "ACTIVE",
    "ib_rate_gbps": "400",
    "dcgm_diag": "pass",
    "nvbandwidth_h2d_gbps": "55.12",
    "nvbandwidth_d2h_gbps": "55.30",
    "nvbandwidth_d2d_gbps": "370.45",
    "nccl_busbw_gbps": "480.12",
    "tool_time_s": "0",
}
FAKE_KEYS = tuple(sorted(DEFAULTS))

#: Values a tool's key takes besides a figure: the tool is absent, hangs, or prints junk.
TOOL_MODES = ("missing", "timeout", "garbage")
_TOOL_KEYS = {
    "nvidia-smi": (),
    "dcgmi": ("dcgm_diag",),
    "nvbandwidth": ("nvbandwidth_h2d_gbps", "nvbandwidth_d2h_gbps", "nvbandwidth_d2d_gbps"),
    "all_reduce_perf": ("nccl_busbw_gbps",),
}
_IB_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
_GT_S = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe"}
_GT_S.update({5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"})

_SMI_HEAD = Template("""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>Fri Nov 27 04:00:00 2026</timestamp>
    <driver_version>$driver</driver_version>
    <cuda_version>$cuda</cuda_version>
    <attached_gpus>$count</attached_gpus>
""")
_SMI_GPU = Template("""    <gpu id="$bus">
        <product_name>NVIDIA H100 80GB HBM3</product_name>
        <persistence_mode>$persistence</persistence_mode>
        <serial>165202300$index</serial>
        <vbios_version>$vbios</vbios_version>
        <inforom_version>
            <img_version>$inforom</img_version>
            <oem_object>2.1</oem_object>
            <ecc_object>7.16</ecc_object>
            <pwr_object>N/A</pwr_object>
        </inforom_version>
        <pci>
            <pci_bus_id>$bus</pci_bus_id>
            <pci_gpu_link_info>
                <pcie_gen>
                    <max_link_gen>5</max_link_gen>
                    <current_link_gen>$gen</current_link_gen>
                </pcie_gen>
                <link_widths>
                    <max_link_width>16x</max_link_width>
                    <current_link_width>${width}x</current_link_width>
                </link_widths>
            </pci_gpu_link_info>
        </pci>
        <fb_memory_usage>
            <total>$memory MiB</total>
            <reserved>551 MiB</reserved>
            <used>0 MiB</used>
            <free>$free MiB</free>
        </fb_memory_usage>
        <ecc_mode>
            <current_ecc>$ecc</current_ecc>
            <pending_ecc>$ecc</pending_ecc>
        </ecc_mode>
    </gpu>
""")
_NVBW_HEAD = Template("""nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: $driver

$devices
""")
_NVBW_CASE = Template("""Running $name.
memcpy CE $title bandwidth (GB/s)
$matrix

SUM $name $sum

""")
_NCCL = Template("""# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus $count minBytes $size maxBytes $size step: 2(factor) warmup iters: 1 \
iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
$devices#
#                                                              out-of-place                \
       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     \
time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            \
(us)  (GB/s)  (GB/s)
$row
# Out of bounds values : 0 OK
# Avg bus bandwidth    : $busbw
#
# Collective test concluded: all_reduce_perf
""")


_COUNTS = {"gpu_count": (0, 64), "ib_ports": (0, 64), "pcie_width": (1, 32), "pcie_gen": (1, 6)}
_TOOL_FIGURES = ("nccl_busbw_gbps", *_TOOL_KEYS["nvbandwidth"])
_FIGURES = ("gpu_memory_mib", "ib_rate_gbps", "tool_time_s", *_TOOL_FIGURES)
_WORDS = {
    "ecc": ("enabled", "disabled"),
    "persistence": ("enabled", "disabled"),
    "dcgm_diag": ("pass", "fail", *TOOL_MODES),
    "ib_state": tuple(_IB_STATES),
}


def check_override(key: str, value: str) -> None:
    """Raise ValueError, naming the key and what it takes, unless `key=value` is an
    override FakeToolHost models (``navarch local inject --acceptance`` checks here)."""
    if key not in DEFAULTS:
        raise ValueError(f"unknown acceptance override {key}; known keys: {', '.join(FAKE_KEYS)}")
    if key in _COUNTS:
        low, high = _COUNTS[key]
        if not value.isdigit() or not low <= int(value) <= high:
            raise ValueError(f"acceptance override {key} takes a whole number {low}-{high}")
    elif key in _FIGURES:
        modes = TOOL_MODES if key in _TOOL_FIGURES else ()
        try:
            ok = 0 <= float(value) < float("inf") or value in modes
        except ValueError:
            ok = value in modes
        if not ok:
            also = f" or one of {', '.join(modes)}" if modes else ""
            raise ValueError(f"acceptance override {key} takes a figure >= 0{also}")
    elif key in _WORDS and (value.upper() if key == "ib_state" else value) not in _WORDS[key]:
        raise ValueError(f"acceptance override {key} takes one of {', '.join(_WORDS[key])}")
    elif not value or len(value) > 64 or not value.isprintable():
        raise ValueError(f"acceptance override {key} takes a version of 1-64 printable characters")


def _bus(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


class FakeToolHost:
    """A healthy 8-GPU H100 node with overrides (see the module docstring).

    overrides: key -> value as text; raises ValueError naming the known keys for an
    unknown key. ``calls`` records every argv run, in order; ``elapsed_s`` is the host's
    clock: seconds its tool runs took (``tool_time_s`` each, a missing tool none)."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        for key, value in (overrides or {}).items():
            check_override(key, str(value))
        self.values = {**DEFAULTS, **{k: str(v) for k, v in (overrides or {}).items()}}
        self.calls: list[tuple[str, ...]] = []
        self.elapsed_s = 0.0
        self.files = self._sysfs()

    def _int(self, key: str) -> int:
        return int(float(self.values[key]))

    # -- programs -----------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        """See ToolHost.run: the tool's output for argv[0]'s base name; exit 127 for a
        program this fake does not model."""
        self.calls.append(tuple(argv))
        tool = argv[0].rsplit("/", 1)[-1]
        modes = [self.values[k] for k in _TOOL_KEYS.get(tool, ())]
        if "missing" in modes or tool not in _TOOL_KEYS:
            return ToolOutput(NOT_FOUND_EXIT, stderr=f"{tool}: No such file or directory")
        self.elapsed_s += float(self.values["tool_time_s"])
        if "timeout" in modes:
            return ToolOutput(-9, stdout="", timed_out=True)
        if "garbage" in modes:
            return ToolOutput(0, stdout="Segmentation fault (core dumped)\n\x1b[31m??\n")
        if tool == "nvidia-smi":
            return ToolOutput(0, self._smi())
        if tool == "dcgmi":
            return self._dcgmi(argv)
        if tool == "nvbandwidth":
            return ToolOutput(0, self._nvbandwidth(argv))
        return ToolOutput(0, self._nccl(argv))

    def _smi(self) -> str:
        v = self.values
        count = self._int("gpu_count")
        out = _SMI_HEAD.substitute(driver=v["driver"], cuda=v["cuda"], count=count)
        for i in range(count):
            memory = self._int("gpu_memory_mib")
            out += _SMI_GPU.substitute(
                bus=_bus(i),
                index=i,
                persistence=v["persistence"].capitalize(),
                vbios=v["vbios"] if i == 0 else DEFAULTS["vbios"],
                inforom=v["inforom"] if i == 0 else DEFAULTS["inforom"],
                gen=v["pcie_gen"] if i == 0 else DEFAULTS["pcie_gen"],
                width=v["pcie_width"] if i == 0 else DEFAULTS["pcie_width"],
                memory=memory,
                free=max(memory - 551, 0),
                ecc=v["ecc"].capitalize(),
            )
        return out + "</nvidia_smi_log>\n"

    def _dcgmi(self, argv: Sequence[str]) -> ToolOutput:
        level = argv[argv.index("-r") + 1] if "-r" in argv else "1"
        fail = self.values["dcgm_diag"] == "fail"
        count = self._int("gpu_count")
        tests = [("Deployment", "software")]
        if level in ("2", "3", "4"):
            tests += [("Integration", "pcie"), ("Hardware", "memory")]
        if level in ("3", "4"):
            tests += [("Hardware", "diagnostic"), ("Stress", "targeted_stress")]
        categories: dict[str, list[object]] = {}
        for n, (category, name) in enumerate(tests):
            failing = fail and n == len(tests) - 1
            results = []
            for gpu in range(count):
                result: dict[str, object] = {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entity_id": gpu,
                    "status": "Fail" if failing and gpu == 0 else "Pass",
                }
                if failing and gpu == 0:
                    result["warnings"] = [
                        {
                            "error_category": 10,
                            "error_id": 83,
                            "error_severity": 2,
                            "warning": f"Error using CUDA API cudaMemcpy in {name} on GPU 0",
                        }
                    ]
                results.append(result)
            categories.setdefault(category, []).append(
                {
                    "name": name,
                    "results": results,
                    "test_summary": {"status": "Fail" if failing else "Pass"},
                }
            )
        doc = {
            "DCGM Diagnostic": {
                "test_categories": [{"category": c, "tests": t} for c, t in categories.items()]
            },
            "entity_groups": [
                {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entities": [
                        {"entity_id": g, "device_id": "2330", "serial_num": f"165202300{g}"}
                        for g in range(count)
                    ],
                }
            ],
            "metadata": {"version": "4.2.3", "Driver Version Detected": self.values["driver"]},
        }
        # dcgmi's exit for a failed GPU test is DCGM_ST_NVVS_ERROR (-30) as a byte: 226.
        return ToolOutput(226 if fail else 0, json.dumps(doc, indent=4) + "\n")

    def _nvbandwidth(self, argv: Sequence[str]) -> str:
        count = self._int("gpu_count")
        wanted = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-t", "--testcase")]
        devices = "\n".join(
            f"Device {i}: NVIDIA H100 80GB HBM3 ({_bus(i)[:-2]})" for i in range(count)
        )
        out = _NVBW_HEAD.substitute(driver=self.values["driver"], devices=devices)
        host = {
            "host_to_device_memcpy_ce": ("CPU(row) -> GPU(column)", "nvbandwidth_h2d_gbps"),
            "device_to_host_memcpy_ce": ("CPU(row) <- GPU(column)", "nvbandwidth_d2h_gbps"),
        }
        for name in wanted:
            if name in host:
                title, key = host[name]
                cells = [float(self.values[key])] + [float(DEFAULTS[key])] * (count - 1)
                header = "".join(f"{i:>10}" for i in range(count))
                matrix = f"     {header}\n 0   " + "".join(f"{c:>10.2f}" for c in cells)
                total = sum(cells)
            else:
                title = "GPU(row) -> GPU(column)"
                rows = ["     " + "".join(f"{i:>10}" for i in range(count))]
                total = 0.0
                for r in range(count):
                    line = f"{r:>2}   "
                    for c in range(count):
                        if r == c:
                            line += f"{'N/A':>10}"
                            continue
                        value = float(DEFAULTS["nvbandwidth_d2d_gbps"])
                        if (r, c) == (0, 1):
                            value = float(self.values["nvbandwidth_d2d_gbps"])
                        total += value
                        line += f"{value:>10.2f}"
                    rows.append(line)
                matrix = "\n".join(rows)
            out += _NVBW_CASE.substitute(name=name, title=title, matrix=matrix, sum=f"{total:.2f}")
        return (
            out
            + "NOTE: The reported results may not reflect the full capabilities of the platform.\n"
        )

    def _nccl(self, argv: Sequence[str]) -> str:
        count = int(argv[argv.index("-g") + 1]) if "-g" in argv else 1
        size = _bytes(argv[argv.index("-b") + 1]) if "-b" in argv else 1 << 30
        busbw = float(self.values["nccl_busbw_gbps"])
        algbw = busbw * count / (2 * (count - 1)) if count > 1 else busbw
        time_us = size / (algbw * 1e3) if algbw else 0.0
        half = f"{time_us:>9.1f} {algbw:>7.2f} {busbw:>7.2f} {0:>6}"
        row = f"{size:>12} {size // 4:>13}     float     sum      -1 {half} {half}"
        devices = "".join(
            f"#  Rank {i:>2} Group  0 Pid 895544 on     node-1 device {i:>2} "
            f"[{_bus(i)[4:-2]}] NVIDIA H100 80GB HBM3\n"
            for i in range(count)
        )
        return _NCCL.substitute(
            count=count, size=size, devices=devices, row=row, busbw=f"{busbw:.5g}"
        )

    # -- files --------------------------------------------------------------------------

    def _sysfs(self) -> dict[str, str]:
        files: dict[str, str] = {}
        v = self.values
        for i in range(self._int("gpu_count")):
            base = f"{PCI_DEVICES}/{_bus(i)[4:].lower()}/"
            first = i == 0
            files[base + "vendor"] = "0x10de\n"
            files[base + "class"] = "0x030200\n"
            files[base + "max_link_speed"] = _GT_S[5] + "\n"
            files[base + "max_link_width"] = "16\n"
            gen = self._int("pcie_gen") if first else 5
            files[base + "current_link_speed"] = _GT_S.get(gen, "Unknown") + "\n"
            files[base + "current_link_width"] = (v["pcie_width"] if first else "16") + "\n"
        files[f"{PCI_DEVICES}/0000:00:00.0/vendor"] = "0x8086\n"  # a host bridge, not a GPU
        files[f"{PCI_DEVICES}/0000:00:00.0/class"] = "0x060000\n"
        for n in range(self._int("ib_ports")):
            hca = f"{INFINIBAND}/mlx5_{n}/"
            first = n == 0
            state = v["ib_state"].upper() if first else "ACTIVE"
            rate = float(v["ib_rate_gbps"]) if first else 400.0
            files[hca + "fw_ver"] = (
                v["nic_firmware"] if first else DEFAULTS["nic_firmware"]
            ) + "\n"
            files[hca + "ports/1/state"] = f"{_IB_STATES.get(state, 0)}: {state}\n"
            files[hca + "ports/1/phys_state"] = (
                "5: LinkUp\n" if state == "ACTIVE" else "3: Disabled\n"
            )
            files[hca + "ports/1/rate"] = f"{rate:g} Gb/sec (4X NDR)\n"
            files[hca + "ports/1/link_layer"] = "InfiniBand\n"
        return files

    def read_text(self, path: str) -> str:
        """See ToolHost.read_text: the fake sysfs tree."""
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(2, "No such file or directory", path) from None

    def list_dir(self, path: str) -> tuple[str, ...]:
        """See ToolHost.list_dir: the names one level under path in the fake tree."""
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self.files if p.startswith(prefix)}
        if not names:
            raise FileNotFoundError(2, "No such file or directory", path)
        return tuple(sorted(names))


def _bytes(text: str) -> int:
    """nccl-tests' size argument ("8", "128M", "16G") in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    suffix = text[-1:].upper()
    return int(text[:-1]) * units[suffix] if suffix in units else int(text)
