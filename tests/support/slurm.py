"""A real one-node Slurm cluster on 127.0.0.1 for the playbook tests (Debian's Slurm 22.05).

`start_slurm(base, node)` creates a munge key and starts munged, slurmctld and slurmd in
the foreground as children, with slurm.conf, state, spool, pid and log files under
`base`, on free ports; it yields a `SlurmCluster` once the node is IDLE and stops the
daemons on exit (`scontrol shutdown`, then munged). No cgroups and no init system:
ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, SlurmUser=root. The node runs
under a chosen name (`slurmd -N NAME`, NodeAddr=127.0.0.1), so a test can name it after
the local provider's node it stands for. Client commands find the cluster through
SLURM_CONF.

ReturnToService=1 (a node set DOWN by hand stays DOWN until resumed, as on most sites;
with 2 a DOWN node whose slurmd answers returns by itself within a second).
Jobs are gated: `submit_gated` starts a job that runs until the test creates its gate
file (at most 120 s), so a test decides when the work ends and never waits on a clock.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.sshd import free_port
from tests.support.system import require_system_package

#: Debian package -> a file it installs (the probe require_system_package checks).
PACKAGES = {
    "munge": "/usr/sbin/munged",
    "slurmctld": "/usr/sbin/slurmctld",
    "slurmd": "/usr/sbin/slurmd",
    "slurm-client": "/usr/bin/scontrol",
}

#: A bound for every wait on the cluster (daemon start, a state change, a job's end).
WAIT_S = 60.0

_STATE = re.compile(r"\bState=(\S+)")
_REASON = re.compile(r"^\s*Reason=(.*?)(?: \[[^\]]*\])?$", re.MULTILINE)


def require_slurm() -> None:
    """Skip (fail under NAVARCH_REQUIRE_SYSTEM_PACKAGES=1) unless munge and Slurm are
    installed, naming the missing Debian package."""
    for package, probe in PACKAGES.items():
        require_system_package(package, probe)


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node cluster: its slurm.conf, the node's name and a work directory."""

    conf: Path
    node: str
    base: Path

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client command needs (this process's plus SLURM_CONF)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (scontrol, sinfo, squeue, sbatch, scancel)."""
        proc = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=WAIT_S
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr}")
        return proc

    def show(self, node: str | None = None) -> str:
        """`scontrol show node NODE` as text."""
        return self.run("scontrol", "show", "node", node or self.node).stdout

    def state(self, node: str | None = None) -> str:
        """The node's State= field, e.g. IDLE, MIXED+DRAIN, IDLE+DRAIN, DOWN+DRAIN."""
        match = _STATE.search(self.show(node))
        assert match, self.show(node)
        return match.group(1)

    def reason(self, node: str | None = None) -> str:
        """The node's Reason= text without Slurm's ` [user@time]` suffix ('' when none)."""
        match = _REASON.search(self.show(node))
        return match.group(1) if match else ""

    def sinfo_state(self, node: str | None = None) -> str:
        """sinfo's long state name: idle, draining, drained, down, ..."""
        return self.run("sinfo", "-h", "-n", node or self.node, "-o", "%T").stdout.strip()

    def jobs(self) -> list[tuple[str, str]]:
        """(job id, state) of every job Slurm still knows as pending, running or completing."""
        out = self.run("squeue", "-h", "-o", "%i %T").stdout
        return [(line.split()[0], line.split()[1]) for line in out.splitlines() if line.strip()]

    def submit_gated(self, gate: Path) -> str:
        """Start a one-CPU job on the node that ends once `gate` exists (at most 120 s);
        returns its job id once it runs."""
        script = f"for i in $(seq 1200); do [ -e {gate} ] && exit 0; sleep 0.1; done"
        job = self.run(
            "sbatch",
            "--parsable",
            "-w",
            self.node,
            "-n",
            "1",
            "-J",
            "navarch-test",
            "-o",
            "/dev/null",
            f"--chdir={self.base}",
            "--wrap",
            script,
        ).stdout.strip()
        self.wait(lambda: (job, "RUNNING") in self.jobs(), f"job {job} running")
        return job

    def wait(self, done: Callable[[], bool], what: str) -> None:
        """Poll `done` every 0.1 s; fail naming `what` and the node after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {WAIT_S:.0f} s: {self.show()}")
            time.sleep(0.1)

    def wait_state(self, want: str, node: str | None = None) -> str:
        """Wait until the node's State= is exactly `want`; returns it."""
        self.wait(lambda: self.state(node) == want, f"State={want}")
        return want

    def reset(self) -> None:
        """Back to an IDLE node with no job and no reason, whatever a test left."""
        self.run("scancel", "--full", "-u", "root", check=False)
        self.wait(lambda: not self.jobs(), "empty queue")
        if self.state() != "IDLE":
            self.run("scontrol", "update", f"NodeName={self.node}", "State=RESUME", check=False)
        self.wait_state("IDLE")


def _conf(
    base: Path,
    node: str,
    ctld_port: int,
    slurmd_port: int,
    socket: Path,
    peers: Sequence[str] = (),
) -> str:
    if peers:
        return _multi_node_conf(_conf(base, node, ctld_port, slurmd_port, socket), base, peers)
    return f"""\
ClusterName=navarchtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
ReturnToService=1
MpiDefault=none
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdTimeout=30
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _multi_node_conf(conf: str, base: Path, peers: Sequence[str]) -> str:
    """One slurmd per node on this host: each node its own port, and its pid file, spool
    and log named after it (%n); Debian's Slurm allows several slurmd on one host."""
    conf = conf.replace(f"{base}/slurmd.pid", f"{base}/slurmd-%n.pid")
    conf = conf.replace(f"SlurmdSpoolDir={base}/spool", f"SlurmdSpoolDir={base}/spool/%n")
    conf = conf.replace(f"{base}/log/slurmd.log", f"{base}/log/slurmd-%n.log")
    port = re.search(r"^SlurmdPort=(\d+)$", conf, re.MULTILINE)
    assert port is not None
    conf = conf.replace("NodeAddr=127.0.0.1 CPUs=2", f"NodeAddr=127.0.0.1 Port={port[1]} CPUs=2")
    lines = [
        f"NodeName={peer} NodeAddr=127.0.0.1 Port={free_port()} CPUs=2 RealMemory=1000 "
        "State=UNKNOWN"
        for peer in peers
    ]
    head, _, partition = conf.rpartition("PartitionName=")
    return head + "\n".join(lines) + "\nPartitionName=" + partition


def _tail(path: Path) -> str:
    return path.read_text()[-2000:] if path.exists() else "(no log)"


@contextmanager
def start_slurm(base: Path, node: str, peers: Sequence[str] = ()) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd for one node named `node` (and one more slurmd per name
    in `peers`, on this host too), all under `base`; yields the cluster once every node is
    IDLE, stops every daemon on exit. Fails the test with the daemons' log tails when one
    exits or a node is not IDLE within WAIT_S."""
    require_slurm()
    if os.geteuid() != 0:
        pytest.skip("the Slurm fixture runs slurmd as root (SlurmdUser=root) and must run as root")
    for sub in ("munge", "state", "spool", "log"):
        (base / sub).mkdir(mode=0o700, exist_ok=True)
    run_dir = base / "munge-run"  # the socket's directory must be reachable by every user
    run_dir.mkdir(mode=0o755, exist_ok=True)
    key, socket = base / "munge" / "munge.key", run_dir / "munge.socket"
    subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True)
    conf = base / "slurm.conf"
    conf.write_text(_conf(base, node, free_port(), free_port(), socket, peers))
    cluster = SlurmCluster(conf=conf, node=node, base=base)
    logs = base / "log"
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(name: str, argv: list[str]) -> None:
        with open(logs / f"{name}.out", "w") as out:
            procs.append(
                (
                    name,
                    subprocess.Popen(
                        argv, stdout=out, stderr=subprocess.STDOUT, env=cluster.env, cwd=base
                    ),
                )
            )

    def check_alive() -> None:
        for name, proc in procs:
            if proc.poll() is not None:
                pytest.fail(
                    f"{name} exited with {proc.returncode}: "
                    f"{_tail(logs / f'{name}.out')}\n{_tail(logs / f'{name}.log')}"
                )

    try:
        spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={socket}",
                f"--pid-file={run_dir}/munged.pid",
                f"--log-file={logs}/munged.log",
                f"--seed-file={base}/munge/seed",
            ],
        )
        _until(lambda: socket.exists(), check_alive, "munged's socket")
        spawn("slurmctld", ["slurmctld", "-D", "-f", str(conf)])
        _until(
            lambda: cluster.run("scontrol", "ping", check=False).returncode == 0,
            check_alive,
            "slurmctld answering scontrol ping",
        )
        for name in (node, *peers):
            if peers:
                (base / "spool" / name).mkdir(mode=0o700, exist_ok=True)
            spawn(
                f"slurmd-{name}" if peers else "slurmd",
                ["slurmd", "-D", "-N", name, "-f", str(conf)],
            )
        for name in (node, *peers):
            _until(lambda n=name: cluster.state(n) == "IDLE", check_alive, f"node {name} IDLE")
        yield cluster
    finally:
        _stop(cluster, procs)


def _until(done: Callable[[], bool], check_alive: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        check_alive()
        if done():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Slurm fixture: no {what} within {WAIT_S:.0f} s")
        time.sleep(0.1)


def _stop(cluster: SlurmCluster, procs: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """`scontrol shutdown` stops slurmctld and slurmd cleanly; munged goes last (the
    shutdown RPC is authenticated through it). A daemon still up after 30 s is killed."""
    slurm = [p for name, p in procs if name != "munged"]
    if any(p.poll() is None for p in slurm):
        cluster.run("scontrol", "shutdown", check=False)
    for name, proc in reversed(procs):
        if name == "munged":
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
