"""Benchmark: the object-store requests and cost of one node-day of agent checks.

    python bench/store_cost.py [--hours 24]

Runs the real agent (navarch.agent.run_once, 8 fake GPUs, in-process, on a virtual clock)
through one simulated node-day against a file store that counts requests, in two
settings:

- ``before``: a check every 60 s that writes its report every time (navarch before reports
  were written on change: timer 60 s, every run a GET of the node's previous report and a
  PUT), i.e. ``heartbeat_s: 0``;
- ``defaults``: a check every 30 s (the timer's default), the report written on change or
  every ``heartbeat_s`` (300 s), a GET only before a write.

Each day holds one fault episode (an uncorrectable ECC error injected for 10 minutes, then
cleared), so on-change writes are counted too. Prints per setting the checks, PUTs and GETs
per node-day and their cost at Amazon S3 Standard request prices, US East (N. Virginia):
PUT/COPY/POST/LIST USD 0.005 per 1,000 requests, GET USD 0.0004 per 1,000 requests
(https://aws.amazon.com/s3/pricing/, "Requests & data retrievals"); last line
``puts_per_node_day_before=... puts_per_node_day=... usd_per_1000_node_days_before=...
usd_per_1000_node_days=...``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: Amazon S3 Standard, US East (N. Virginia), USD per request (see the module docstring).
S3_PUT_USD = 0.005 / 1000
S3_GET_USD = 0.0004 / 1000
T0 = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Setting:
    name: str
    interval_s: int
    heartbeat_s: float


SETTINGS = (Setting("before", 60, 0), Setting("defaults", 30, 300))


def node_day(setting: Setting, hours: float, directory: Path) -> dict[str, Any]:
    """Run one node's checks for `hours` of virtual time -> counts of checks, PUTs, GETs."""
    from navarch.agent import AgentConfig, run_once
    from navarch.stores.file import FileStore

    class Counting(FileStore):
        puts = 0
        gets = 0

        def put(self, key: str, data: bytes, **kw: Any) -> str:
            Counting.puts += 1
            return super().put(key, data, **kw)

        def get(self, key: str) -> Any:
            Counting.gets += 1
            return super().get(key)

    store = Counting(directory / "store")
    faults = directory / "faults.json"
    config = AgentConfig(
        fleet="cost",
        pool="train",
        node="cost-train-0001",
        instance_id="i-0",
        store=f"file://{directory}/store",
        key="5a" * 32,
        gpus_per_node=8,
        state_file=str(directory / "agent.json"),
        kernel_log=str(directory / "kern.log"),
        fake_gpu=True,
        gpu_count=8,
        faults_file=str(faults),
        boot_id="boot-a",
        metadata="none",
        heartbeat_s=setting.heartbeat_s,
    )
    checks = int(hours * 3600 // setting.interval_s)
    fault_from, fault_to = checks // 2, checks // 2 + 600 // setting.interval_s
    for n in range(checks):
        if n == fault_from:
            faults.write_text(json.dumps({"ecc_uncorrected": {"3": 2}}))
        if n == fault_to:
            faults.write_text("{}")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run_once(config, now=T0 + timedelta(seconds=n * setting.interval_s), store=store)
    scale = 24 / hours
    return {"checks": checks * scale, "puts": Counting.puts * scale, "gets": Counting.gets * scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="virtual hours to run")
    args = parser.parse_args()
    import logging

    logging.getLogger("navarch.agent").disabled = True
    figures = {}
    for setting in SETTINGS:
        with tempfile.TemporaryDirectory(prefix="navarch-cost-") as tmp:
            f = node_day(setting, args.hours, Path(tmp))
        f["usd"] = f["puts"] * S3_PUT_USD + f["gets"] * S3_GET_USD
        figures[setting.name] = f
        print(
            f"{setting.name:9s} check every {setting.interval_s:>3d} s, heartbeat "
            f"{setting.heartbeat_s or 'every check'}: {f['checks']:.0f} checks, "
            f"{f['puts']:.0f} PUTs, {f['gets']:.0f} GETs per node-day = "
            f"USD {f['usd']:.5f} per node-day, USD {f['usd'] * 1000 * 30:.2f} per "
            f"1,000 nodes per 30 days",
            flush=True,
        )
    before, now = figures["before"], figures["defaults"]
    print(
        f"puts_per_node_day_before={before['puts']:.0f} puts_per_node_day={now['puts']:.0f} "
        f"usd_per_1000_node_days_before={before['usd'] * 1000:.2f} "
        f"usd_per_1000_node_days={now['usd'] * 1000:.2f}"
    )


if __name__ == "__main__":
    main()
