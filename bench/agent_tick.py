"""Benchmark: the agent bundle's size, and wall time and peak RSS of one agent tick on 8
fake GPUs, as a subprocess.

    python bench/agent_tick.py [--runs N]

Builds the agent bundle (``navarch agent bundle``) and runs it as the nodes' systemd unit
does, ``python3 -I -S navarch-agent.pyz run --once`` with NAVARCH_BUNDLE_CACHE (and once
without it, straight from the zip), on this Python and on every other
Python 3.9-3.13 found on PATH or under $PYENV_ROOT/versions; then the installed entry
points ``python -m navarch.agent run --once`` and ``navarch agent run --once``, and a bare
``python -c pass`` for the interpreter's own start-up cost. Each run is a fresh process;
per-process peak RSS comes from os.wait4. Prints one line per variant (median and max
wall time over the runs, max RSS) and, last, ``bundle_bytes=N wall_s=X rss_mb=Y`` for the
bundle on this Python. Targets (the issue's): under 25 MB, 0.5 s and 60 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one run of cmd; raises on a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.read().decode()[-500:]}"
        )
    return wall, usage.ru_maxrss / 1024.0  # Linux: ru_maxrss in KiB


def other_pythons() -> dict[str, str]:
    """ "3.X" -> interpreter path for the supported versions other than this one."""
    found = {}
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    pyenv = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "versions"
    for version in ("3.9", "3.10", "3.11", "3.12", "3.13"):
        if version == this:
            continue
        candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"))
        path = str(candidates[-1]) if candidates else shutil.which(f"python{version}")
        if path and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            found[version] = path
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg = d / "agent.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "fleet": "bench",
                    "pool": "train",
                    "node": "train-0001",
                    "store": f"file://{d}/store",
                    "key": "5a" * 32,
                    "gpus_per_node": 8,
                    "fake_gpu": True,
                    "gpu_count": 8,
                    "metadata": "none",
                    "state_file": str(d / "state.json"),
                    "kernel_log": str(d / "kern.log"),
                    "boot_id": "bench-boot",
                }
            )
        )
        (d / "kern.log").write_text(
            "[  100.0] NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=python, Graphics Exception\n"
            * 50
        )
        # As the systemd unit runs it: unpacked once, bytecode cached (navarch.agent.bundle).
        env = {
            **os.environ,
            "NAVARCH_FAKE_GPU": "true",
            "NAVARCH_BUNDLE_CACHE": str(d / "bundle-cache"),
        }
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from navarch.agent.bundle import write_bundle

        bundle = write_bundle(d / "navarch-agent.pyz")
        pyz = str(d / "navarch-agent.pyz")
        print(
            f"bundle: {bundle.size_bytes} bytes ({bundle.size_bytes / 2**20:.2f} MiB), "
            f"sha256 {bundle.sha256}"
        )
        isolated = ["-I", "-S", pyz, "run", "--once", "--config", str(cfg)]
        variants = {
            "bundle: python3 -I -S (this python)": [sys.executable, *isolated],
            "bundle: python3 -I -S, from the zip": [
                "env",
                "-u",
                "NAVARCH_BUNDLE_CACHE",
                sys.executable,
                *isolated,
            ],
            **{
                f"bundle: python{v} -I -S": [path, *isolated] for v, path in other_pythons().items()
            },
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -m navarch.agent run --once": [
                sys.executable,
                "-m",
                "navarch.agent",
                "run",
                "--once",
                "--config",
                str(cfg),
            ],
            "navarch agent run --once": [
                sys.executable,
                "-m",
                "navarch",
                "agent",
                "run",
                "--once",
                "--config",
                str(cfg),
            ],
        }
        results = {}
        for name, cmd in variants.items():
            measure(cmd, env)  # warm the page cache and .pyc files
            samples = [measure(cmd, env) for _ in range(args.runs)]
            walls = [w for w, _ in samples]
            rss = max(r for _, r in samples)
            results[name] = (statistics.median(walls), rss)
            print(
                f"{name:40s} median_wall_s={statistics.median(walls):.3f} max_wall_s={max(walls):.3f} "
                f"peak_rss_mb={rss:.1f} runs={args.runs}"
            )
        wall, rss = results["bundle: python3 -I -S (this python)"]
        print(f"bundle_bytes={bundle.size_bytes} wall_s={wall:.3f} rss_mb={rss:.1f}")


if __name__ == "__main__":
    main()
