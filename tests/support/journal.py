"""Helpers for the journal and lease tests: a small local fleet, and a `navarch` child
whose local provider can be held inside a launch (so a test can SIGKILL or SIGSTOP it at
a known point), and whose lease's clock a test moves on instead of sleeping (stall)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from navarch.reconcile.state import lock_key
from navarch.stores.file import FileStore
from tests.support.cli import run_navarch

ROOT = Path(__file__).resolve().parents[2]
FLEET = "jt"

#: The head of every held child's script. Its argv[1], popped here, names a file of
#: seconds: the child's lease reads its monotonic clock as the system's plus that many
#: (Lease's injected monotonic), so stall() puts a SIGSTOPped child past its TTL at once.
LEASE_CLOCK = r"""
import sys, time
from functools import partial
from pathlib import Path
from navarch.reconcile import run as _run

_ahead = Path(sys.argv.pop(1))

def _lease_monotonic():
    try:
        return time.monotonic() + float(_ahead.read_text())
    except (OSError, ValueError):
        return time.monotonic()

_run.Lease = partial(_run.Lease, monotonic=_lease_monotonic)
"""

#: The child: patches LocalProvider.provision, then runs navarch's CLI on argv[5:].
#: argv: calls file (one line per provision entered), marker (touched when holding),
#: hold mode ("first": hold in the first provision; "after-cordon": hold once the state
#: document records a cordoned or draining node, which the executor's every_s timer
#: journals: 0.2 s here, not 10, so the test does not wait it out; "none"), go file (the
#: hold ends when it exists), state file path.
CHILD = (
    LEASE_CLOCK
    + r"""
import json, sys, time
from pathlib import Path
from navarch.providers import local

calls, marker, mode, go, state = (Path(a) for a in sys.argv[1:6])
mode = str(mode)
original = local.LocalProvider.provision
if mode == "after-cordon":
    from navarch.reconcile import executor
    executor.JournalPolicy = partial(executor.JournalPolicy, every_s=0.2)

def phases():
    try:
        doc = json.loads(state.read_text())
    except (OSError, ValueError):
        return set()
    return {n["phase"] for n in doc.get("nodes", {}).values()}

def provision(self, request):
    with open(calls, "a") as fh:
        fh.write(request.node + "\n")
    if mode == "first":
        marker.touch()
        while not go.exists():
            time.sleep(0.02)
        return original(self, request)
    inst = original(self, request)
    if mode == "after-cordon":
        while not phases() & {"cordoned", "draining"}:
            time.sleep(0.02)
        marker.touch()
        while not go.exists():
            time.sleep(0.02)
    return inst

local.LocalProvider.provision = provision
from navarch.cli import main
sys.exit(main(sys.argv[6:]))
"""
)


def write_fleet(
    root: Path, *, target: int = 4, max_parallel: int = 4, lock_ttl: str = "2m", max_surge: int = 1
) -> Path:
    """A one-pool local fleet `jt` in root (store, machines and secret beside it)."""
    (root / "fleet.secret").write_text("0123456789abcdef0123456789abcdef\n")
    doc = {
        "fleet": FLEET,
        "store": "file://store",
        "secret": {"file": "fleet.secret"},
        "providers": {"sim": {"type": "local", "dir": "local", "max_parallel": max_parallel}},
        "safety": {
            "lock_ttl": lock_ttl,
            "circuit_breaker_pct": 100,
            "fleet_circuit_breaker_pct": 100,
            "max_launches_per_run": max(target, 1),
        },
        "pools": {
            "train": {
                "provider": "sim",
                "instance_types": ["sim-h100x8"],
                "gpus_per_node": 1,
                "region": "sim-1",
                "zones": ["sim-1a"],
                "nodes": {"min": 0, "target": target, "max": target + max_surge},
                "scheduler": "none",
                # surge_on any: these fleets' XID 79 (a reboot) must launch a surge replacement
                "health": {
                    "unhealthy_after": 1,
                    "max_unavailable": 1,
                    "replacement": "surge",
                    "max_surge": max_surge,
                    "surge_on": "any",
                },
            }
        },
    }
    path = root / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def state_path(root: Path) -> Path:
    return root / "store" / "state" / f"{FLEET}.json"


def lock_path(root: Path) -> Path:
    return root / "store" / "state" / f"{FLEET}.lock"


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    e["PYTHONPATH"] = str(ROOT)
    return e


def navarch(root: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`navarch ARGS` in root, in this process (timeout_s bounds a subprocess run only)."""
    return run_navarch(args, cwd=root, env=env(), inherit=False, timeout=timeout_s)


def lease_clock_file(root: Path) -> Path:
    """The file of seconds a held child's lease clock runs ahead by (see LEASE_CLOCK)."""
    return root / "lease-clock-ahead-s"


def silence_lease(root: Path, seconds: float) -> None:
    """The lease's holder last wrote it `seconds` ago by the store's clock: the lock file's
    mtime, which the file store lists as its modified_at (the store clock a contender
    times the lease by), moves back to now - seconds."""
    store = FileStore(root / "store")
    store.set_modified_at(lock_key(FLEET), datetime.now(UTC) - timedelta(seconds=seconds))


def stall(proc: subprocess.Popen[str], root: Path, seconds: float) -> None:
    """SIGSTOP a held child and let `seconds` pass on both clocks its lease is timed by,
    without waiting them out: the child's own (its lease clock runs that far ahead when it
    wakes) and the store's (the lease reads as silent that long)."""
    os.kill(proc.pid, signal.SIGSTOP)
    lease_clock_file(root).write_text(f"{seconds}\n")
    silence_lease(root, seconds)


class HeldApply:
    """`navarch apply fleet.yaml --auto-approve` in a child that holds inside a launch."""

    def __init__(self, root: Path, mode: str) -> None:
        self.root = root
        self.calls = root / "calls.txt"
        self.marker = root / "holding"
        self.go = root / "go"
        for p in (self.calls, self.marker, self.go, lease_clock_file(root)):
            p.unlink(missing_ok=True)
        self.calls.touch()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(lease_clock_file(root)),
                str(self.calls),
                str(self.marker),
                mode,
                str(self.go),
                str(state_path(root)),
                "apply",
                "fleet.yaml",
                "--auto-approve",
            ],
            cwd=root,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_holding(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.marker.exists():
            assert self.proc.poll() is None, self.proc.communicate()
            assert time.monotonic() < deadline, "the apply never reached the held launch"
            time.sleep(0.02)

    def provisions(self) -> list[str]:
        return self.calls.read_text().split()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate()
