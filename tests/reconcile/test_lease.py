"""The apply lease: renewed by its holder, taken over by CAS once it
lapses, checked before every action and state write; a killed apply blocks the next run
for at most one TTL.

No test waits a TTL out: the store's clock is moved by backdating the lease object's
modification time (silence, silence_lease), and a stalled child's own clock by its lease's
injected monotonic clock (tests.support.journal.stall)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from navarch.errors import LeaseLost, LockHeld
from navarch.reconcile.state import STORE_CLOCK_SLACK_S, Lease, acquire_lock, lock_key
from navarch.stores.file import FileStore
from tests.support.cli import run_navarch
from tests.support.journal import (
    LEASE_CLOCK,
    HeldApply,
    env,
    lease_clock_file,
    lock_path,
    navarch,
    silence_lease,
    stall,
    state_path,
    write_fleet,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
#: Long enough that no lease in these tests lapses on its own, however slow the machine:
#: only the time a test moves the clocks by does.
TTL_S = 60
#: A silence or stall past the TTL and the store clock's slack.
LAPSED_S = TTL_S + STORE_CLOCK_SLACK_S + 1


def silence(store: FileStore, seconds: float) -> None:
    """The lease's holder last wrote it `seconds` ago by the store's clock (it stopped
    renewing): the lock file's mtime, which the file store lists as its modified_at."""
    store.set_modified_at(lock_key("demo"), datetime.now(UTC) - timedelta(seconds=seconds))


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lease_renewal_keeps_it_and_a_takeover_loses_it(tmp_path):
    store = FileStore(tmp_path)
    mono = FakeMonotonic()
    wall = [T0]
    lock = acquire_lock(store, "demo", "apply", 120, T0, holder="a")
    lease = Lease(store, "demo", lock, 120, lambda: wall[0], monotonic=mono)
    lease.check()
    lease.check_store()
    # Renewed: a run 3 minutes after the lease was taken still finds it held.
    mono.now += 100
    wall[0] = T0 + timedelta(seconds=100)
    assert lease.renew()
    with pytest.raises(LockHeld):
        acquire_lock(store, "demo", "apply", 120, T0 + timedelta(minutes=3), holder="b")
    lease.check_store()
    # Not renewed past the TTL: the holder itself stops acting, before anyone takes over.
    mono.now += 120
    with pytest.raises(LeaseLost, match="last renewed 120s ago"):
        lease.check()


def test_lease_taken_over_is_lost_by_version(tmp_path):
    store = FileStore(tmp_path)
    lock = acquire_lock(store, "demo", "apply", 60, T0, holder="a")
    lease = Lease(store, "demo", lock, 60, lambda: T0)
    silence(store, 120)  # a stalled holder: no renewal for two minutes by the store's clock
    other = acquire_lock(store, "demo", "apply", 60, T0, holder="b")
    assert other.took_over and "a running 'apply'" in other.took_over
    with pytest.raises(LeaseLost, match="taken over by b"):
        lease.check_store()
    assert not lease.renew()
    lease.release()  # leaves b's lease alone
    assert json.loads(store.get(lock_key("demo")).data)["holder"] == "b"


def test_two_runs_racing_for_an_expired_lease_end_with_one_holder(tmp_path):
    store = FileStore(tmp_path)
    acquire_lock(store, "demo", "apply", 60, T0, holder="dead")
    silence(store, 300)
    later = T0
    barrier = threading.Barrier(8)
    won: list[str] = []
    refused: list[str] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            lock = acquire_lock(store, "demo", "apply", 60, later, holder=f"run-{i}")
            won.append(lock.holder)
        except LockHeld as exc:
            refused.append(exc.holder)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7
    assert json.loads(store.get(lock_key("demo")).data)["holder"] == won[0]


def test_killed_apply_blocks_the_next_run_for_at_most_one_ttl(tmp_path):
    write_fleet(tmp_path, target=3, max_parallel=1, lock_ttl=f"{TTL_S}s")
    held = HeldApply(tmp_path, "first")
    held.wait_holding()
    held.kill()
    for silent_s in (0, TTL_S - 10):  # the dead run's lease, not yet lapsed, still blocks
        silence_lease(tmp_path, silent_s)
        blocked = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        assert blocked.returncode == 4, blocked.stdout + blocked.stderr
    # Once the lease has been silent past its TTL and the store clock's slack, the next run
    # takes it over and converges.
    silence_lease(tmp_path, TTL_S + STORE_CLOCK_SLACK_S + 0.5)
    run = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "took over the expired lease" in run.stderr
    assert navarch(tmp_path, "plan", "fleet.yaml", "--detailed-exitcode").returncode == 0
    assert not lock_path(tmp_path).exists()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_stalled_apply_whose_lease_is_taken_over_stops_and_exits_5(tmp_path):
    write_fleet(tmp_path, target=3, max_parallel=1, lock_ttl=f"{TTL_S}s")
    held = HeldApply(tmp_path, "first")
    try:
        held.wait_holding()
        stall(held.proc, tmp_path, LAPSED_S)  # a stall: GC pause, swapped out, VM paused
        entered = held.provisions()
        other = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        assert other.returncode == 0, other.stdout + other.stderr
        assert "took over the expired lease" in other.stderr
        state = state_path(tmp_path).read_bytes()
        held.go.touch()  # the launch it was inside may finish (idempotent on its launch id)
        os.kill(held.proc.pid, signal.SIGCONT)
        out, err = held.proc.communicate(timeout=60)
    finally:
        if held.proc.poll() is None:
            os.kill(held.proc.pid, signal.SIGCONT)
            held.kill()
    assert held.proc.returncode == 5, out + err
    assert "lease" in err and "stopped acting" in err
    assert held.provisions() == entered  # no action started after the stall
    assert state_path(tmp_path).read_bytes() == state  # and no state written
    assert navarch(tmp_path, "plan", "fleet.yaml", "--detailed-exitcode").returncode == 0


#: A `navarch` child whose verb holds right after it looked at the world (gather), so a
#: test can stall it there. argv: the lease clock's file (LEASE_CLOCK), marker (touched when
#: holding), go file, then the CLI's.
HELD_VERB = (
    LEASE_CLOCK
    + r"""
import sys, time
from pathlib import Path
from navarch.reconcile import run
from navarch.reconcile.operator import manual, uncordon

marker, go = Path(sys.argv[1]), Path(sys.argv[2])
gather = run.gather

def held(*args, **kwargs):
    snap = gather(*args, **kwargs)
    marker.touch()
    while not go.exists():
        time.sleep(0.02)
    return snap

manual.gather = uncordon.gather = held
from navarch.cli import main
sys.exit(main(sys.argv[3:]))
"""
)


def _machines(root) -> dict[str, str]:
    """node -> boot id of the local fleet's machines."""
    out = {}
    for p in (root / "local" / "jt" / "machines").glob("*/machine.json"):
        m = json.loads(p.read_text())
        out[m["tags"]["navarch-node"]] = m["boot_id"]
    return out


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
@pytest.mark.parametrize("verb", ["reboot", "cordon", "uncordon"])
def test_stalled_manual_verb_whose_lease_is_taken_over_does_nothing(tmp_path, verb):
    """reboot, cordon and uncordon hold the lease like apply: stalled past its TTL while
    another run took the fleet over, the verb acts on nothing, writes no state, exits 5."""
    write_fleet(tmp_path, target=2, max_parallel=1, lock_ttl=f"{TTL_S}s")
    for args in (("apply", "fleet.yaml", "--auto-approve"), ("local", "tick", "fleet.yaml")):
        assert navarch(tmp_path, *args).returncode == 0
    node = "jt-train-0001"
    if verb == "uncordon":
        done = navarch(tmp_path, "cordon", "fleet.yaml", node, "--reason", "bad fan")
        assert done.returncode == 0, done.stdout + done.stderr
    argv = {
        "reboot": ["reboot", "fleet.yaml", node],
        "cordon": ["cordon", "fleet.yaml", node, "--reason", "bad fan"],
        "uncordon": ["uncordon", "fleet.yaml", node],
    }[verb]
    marker, go = tmp_path / "holding", tmp_path / "go"
    boots = _machines(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_VERB, str(lease_clock_file(tmp_path)), str(marker), str(go)]
        + argv,
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{verb} never reached the hold"
            time.sleep(0.02)
        stall(proc, tmp_path, LAPSED_S)  # a stall past the lease's TTL
        other = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        assert other.returncode == 0, other.stdout + other.stderr
        assert "took over the expired lease" in other.stderr
        state = state_path(tmp_path).read_bytes()
        go.touch()
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 5, out + err
    assert "lease" in err and "stopped acting" in err
    assert _machines(tmp_path) == boots  # not rebooted
    assert state_path(tmp_path).read_bytes() == state  # no cordon or uncordon recorded
    assert not lock_path(tmp_path).exists()  # the other run's lease released, ours not rewritten


def _navarch_at(root, now: datetime, *args: str) -> subprocess.CompletedProcess[str]:
    """`navarch ARGS` on a host whose wall clock reads `now` (NAVARCH_NOW)."""
    return run_navarch(args, cwd=root, env={**env(), "NAVARCH_NOW": now.isoformat()}, inherit=False)


def test_a_skewed_runner_never_takes_a_live_lease(tmp_path):
    """A runner whose clock is 3 minutes fast finds the 2-minute lease of a live apply
    (its holder's clock is right) held: the lease is timed by the store's clock, so the
    two never act at once."""
    write_fleet(tmp_path, target=3, max_parallel=1, lock_ttl="2m")
    held = HeldApply(tmp_path, "first")
    try:
        held.wait_holding()
        fast = _navarch_at(
            tmp_path,
            datetime.now(UTC) + timedelta(minutes=3),
            "apply",
            "fleet.yaml",
            "--auto-approve",
        )
        assert fast.returncode == 4, fast.stdout + fast.stderr
        assert "locked by" in fast.stderr and "took over" not in fast.stderr
        assert held.provisions() == ["jt-train-0001"]  # the fast runner launched nothing
        held.go.touch()
        out, err = held.proc.communicate(timeout=120)
    finally:
        if held.proc.poll() is None:
            held.kill()
    assert held.proc.returncode == 0, out + err
    assert "took over" not in err
    assert sorted(held.provisions()) == ["jt-train-0001", "jt-train-0002", "jt-train-0003"]
    assert navarch(tmp_path, "plan", "fleet.yaml", "--detailed-exitcode").returncode == 0


def test_a_slow_runner_still_takes_over_a_lapsed_lease(tmp_path):
    """A lease whose holder died is taken over once it has been silent for its TTL by the
    store's clock, even by a runner whose own clock is 3 minutes slow (by that clock the
    dead holder's expires_at is still minutes away)."""
    write_fleet(tmp_path, target=3, max_parallel=1, lock_ttl=f"{TTL_S}s")
    held = HeldApply(tmp_path, "first")
    held.wait_holding()
    held.kill()
    silence_lease(tmp_path, LAPSED_S)
    slow = _navarch_at(
        tmp_path, datetime.now(UTC) - timedelta(minutes=3), "apply", "fleet.yaml", "--auto-approve"
    )
    assert slow.returncode == 0, slow.stdout + slow.stderr
    assert "took over the expired lease" in slow.stderr
    assert not lock_path(tmp_path).exists()
