"""Multi-node NCCL acceptance: ``all_reduce_perf`` between a new node and a known-good peer of
the same pool, launched through the pool's scheduler from the reconciler's side (a node
cannot start a job on another node).

- Slurm: ``srun -N2 -w NODE,PEER --ntasks-per-node=GPUS --mpi=pmix all_reduce_perf ... -g 1``
  on the head node: one rank per GPU, as nccl-tests' README runs its MPI build
  (``mpirun -np 64 -N 8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1``); ``--mpi=pmix`` is
  how Slurm sites launch it (AWS's and Pyxis' NCCL health checks), not a line nccl-tests
  documents, so it is a parameter.
- Kubernetes: an MPIJob (Kubeflow mpi-operator, kubeflow.org/v2beta1) whose two workers are
  pinned to the node and the peer (templates/nccl-multinode-mpijob.yaml.j2).

The output is read by the node's own parser and verdict
(navarch.agent.acceptance_tools.nccl / suite.nccl_verdict), so one- and two-node runs are
judged alike. The command runs through a ToolHost: the head node's shell in production,
a local one in tests.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from navarch.agent.acceptance_tools.host import ToolHost, ToolOutput
from navarch.agent.acceptance_tools.suite import nccl_verdict
from navarch.agent.acceptance_tools.thresholds import DEFAULT_NCCL_MESSAGE_BYTES
from navarch.errors import ConfigError
from navarch.fleet.spec import PoolSpec
from navarch.remote.playbook import Playbook, PlaybookKind, Step, StepHost
from navarch.remote.runner import PlaybookTarget, SSHRunner
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceStatus,
    AcceptanceTest,
)
from navarch.templating import environment
from navarch.textsafe import node_text

__all__ = [
    "HeadToolHost",
    "PeerRun",
    "kubernetes_mpijob",
    "run_nccl_multi_node",
    "run_drained_peer_test",
    "run_peer_test",
    "srun_argv",
]

#: A Slurm node name or Kubernetes node name navarch will put on a command line: DNS label
#: characters only, so it can neither split srun's -w list nor leave its word.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


@dataclass(frozen=True)
class PeerRun:
    """One two-node run: the node on trial, its known-good peer (same pool, serving),
    GPUs per node (one rank each), the message size in bytes, all_reduce_perf -n
    iterations and Slurm's MPI plugin (srun --mpi)."""

    node: str
    peer: str
    gpus_per_node: int
    message_bytes: int = DEFAULT_NCCL_MESSAGE_BYTES
    iterations: int = 20
    mpi: str = "pmix"
    #: the Slurm reservation the job runs in ("": none): a node drained for acceptance is
    #: reached only through one (run_drained_peer_test)
    reservation: str = ""

    def __post_init__(self) -> None:
        for what, name in (("node", self.node), ("peer", self.peer)):
            if not _NODE_NAME.fullmatch(name):
                raise ValueError(f"{what} name {name!r} is not a host name")
        if self.node == self.peer:
            raise ValueError(f"the peer must be another node than {self.node}")
        if self.gpus_per_node < 1 or self.message_bytes < 1 or self.iterations < 1:
            raise ValueError("gpus_per_node, message_bytes and iterations must be positive")
        if not re.fullmatch(r"[a-z0-9_]+", self.mpi):
            raise ValueError(f"srun --mpi plugin {self.mpi!r} is not a plugin name")
        if self.reservation and not _NODE_NAME.fullmatch(self.reservation):
            raise ValueError(f"reservation {self.reservation!r} is not a reservation name")

    def tool_args(self) -> list[str]:
        """all_reduce_perf's arguments: one size, one GPU per rank, validation on."""
        size = str(self.message_bytes)
        return ["-b", size, "-e", size, "-f", "2", "-g", "1", "-n", str(self.iterations), "-c", "1"]


def srun_argv(run: PeerRun) -> list[str]:
    """The srun command (an argv, never a shell line) that runs the two-node all-reduce."""
    return [
        "srun",
        "-N2",
        "-w",
        f"{run.node},{run.peer}",
        f"--ntasks-per-node={run.gpus_per_node}",
        f"--mpi={run.mpi}",
        *([f"--reservation={run.reservation}"] if run.reservation else []),
        "all_reduce_perf",
        *run.tool_args(),
    ]


def run_nccl_multi_node(policy: AcceptancePolicy, host: ToolHost, run: PeerRun) -> AcceptanceResult:
    """Run the two-node all_reduce_perf through Slurm on `host` (the head node) and judge it.

    Returns an ``nccl_multi_node`` AcceptanceResult: figure the bus bandwidth in GB/s held
    to policy.nccl_multi_node_min_busbw_gbps (None: PASS with the figure, for the
    planner's comparison with the pool's median); FAIL on wrong results; UNKNOWN when srun
    is missing, the run outlives policy.timeout_s, srun or nccl-tests exit with an error
    (a node down, a job refused, all_reduce_perf missing on a node) or the output has no
    table. detail names the node and the peer.
    """
    test = AcceptanceTest.NCCL_MULTI_NODE
    argv = srun_argv(run)
    out = host.run(argv, policy.timeout_s)
    if out.missing:
        return _unknown(test, "srun is not installed where navarch runs it (the head node)")
    if out.timed_out:
        return _unknown(test, f"srun all_reduce_perf timed out after {policy.timeout_s:g} s")
    floor = policy.nccl_multi_node_min_busbw_gbps
    detail = {
        "node": run.node,
        "peer": run.peer,
        "ranks": str(2 * run.gpus_per_node),
        "message_bytes": str(run.message_bytes),
    }
    return nccl_verdict(test, out, floor, "the pool's nccl_multi_node_min_busbw_gbps", detail)


def _unknown(test: AcceptanceTest, reason: str) -> AcceptanceResult:
    return AcceptanceResult(test.value, AcceptanceStatus.UNKNOWN, reason=node_text(reason))


def kubernetes_mpijob(run: PeerRun, *, name: str, namespace: str, image: str) -> str:
    """The MPIJob manifest (YAML text) of the two-node run for a Kubernetes pool.

    name: the job's name (a DNS label); image: a container image with nccl-tests built with
    MPI=1 and an SSH server, as mpi-operator's launcher needs. Every value is written as a
    JSON string (valid YAML), so none can break the document. Raises ValueError for a name
    or namespace that is not a DNS label. Schema: kubeflow/mpi-operator v2beta1 MPIJob.
    """
    for what, value in (("name", name), ("namespace", namespace)):
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise ValueError(f"{what} {value!r} is not a Kubernetes DNS label")
    template = environment(keep_trailing_newline=True).get_template("nccl-multinode-mpijob.yaml.j2")
    return template.render(
        name=name,
        namespace=namespace,
        image=image,
        nodes=[run.node, run.peer],
        gpus_per_node=run.gpus_per_node,
        ranks=2 * run.gpus_per_node,
        tool_args=run.tool_args(),
    )


#: ssh(1)'s exit status when it could not run the command (no connection, host key refused).
SSH_FAILED_EXIT = 255


class HeadToolHost:
    """The pool's scheduler head node (ssh.head_node) as a ToolHost: run() sends argv over
    SSH as one command, every word shell-quoted, through the pool's SSHRunner. The
    multi-node test reads no file, so read_text and list_dir raise OSError."""

    def __init__(self, runner: SSHRunner, target: PlaybookTarget) -> None:
        self.runner = runner
        self.target = target

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        """See ToolHost.run. A command that never finished within timeout_s is
        ``timed_out``; one SSH could not run is exit SSH_FAILED_EXIT with the error."""
        command = "{% raw %}" + shlex.join(argv) + "{% endraw %}"
        step = Step(
            run=command,
            host=StepHost.HEAD,
            timeout_s=timeout_s,
            ignore_errors=True,
            name=argv[0],
        )
        playbook = Playbook(PlaybookKind.DIAGNOSTICS, None, "navarch.remote.nccl_peer", (step,))
        (outcome,) = self.runner.run(playbook, [self.target])
        if not outcome.steps:
            return ToolOutput(SSH_FAILED_EXIT, stderr=outcome.error or "no step ran")
        done = outcome.steps[-1]
        if done.exit_code is None:
            # The runner's mark of a step it stopped at its timeout (a connection that
            # timed out is no run of the command: that is SSH_FAILED_EXIT).
            timed_out = "[navarch: timed out after" in done.output_tail
            code = -9 if timed_out else SSH_FAILED_EXIT
            return ToolOutput(code, stderr=outcome.error or done.output_tail, timed_out=timed_out)
        return ToolOutput(done.exit_code, done.stdout, done.output_tail)

    def read_text(self, path: str) -> str:
        """Not offered on the head node (see the class docstring)."""
        raise OSError(f"the head node's files are not read: {path}")

    def list_dir(self, path: str) -> tuple[str, ...]:
        """Not offered on the head node (see the class docstring)."""
        raise OSError(f"the head node's directories are not listed: {path}")


def run_peer_test(
    fleet: str,
    pool: PoolSpec,
    node: str,
    peer: str,
    *,
    base_dir: Path,
    mpi: str = "pmix",
) -> AcceptanceResult:
    """The executor's side of the multi-node test: run_nccl_multi_node for `node` and the
    known-good `peer` the planner chose (navarch.planner.acceptance.choose_peer), through the
    pool's Slurm head node over SSH (pool.ssh, paths against base_dir, fleet.yaml's
    directory), one rank per GPU (pool.gpus_per_node), judged by the pool's acceptance
    policy. A pool whose ssh settings are wrong, or a name that is not a host name, gives
    ``unknown`` with the reason: never a pass, never an exception.
    """
    policy = pool.acceptance or AcceptancePolicy()
    try:
        run, host = _head(fleet, pool, node, peer, base_dir, mpi)
    except (ValueError, ConfigError) as exc:
        return _unknown(AcceptanceTest.NCCL_MULTI_NODE, f"multi-node NCCL not run: {exc}")
    return run_nccl_multi_node(policy, host, run)


def _head(
    fleet: str, pool: PoolSpec, node: str, peer: str, base_dir: Path, mpi: str
) -> tuple[PeerRun, HeadToolHost]:
    """The pair and the pool's head node as a ToolHost; ValueError or ConfigError for a
    name that is not a host name or ssh settings that are wrong."""
    run = PeerRun(node, peer, gpus_per_node=pool.gpus_per_node, mpi=mpi)
    runner = SSHRunner(pool.ssh, base_dir=base_dir, pool=pool.name)
    target = PlaybookTarget(fleet, pool.name, node, None, f"multi-node NCCL with {peer}")
    return run, HeadToolHost(runner, target)


#: Seconds each scontrol call of run_drained_peer_test may take.
SCONTROL_TIMEOUT_S = 60.0

#: A Slurm user name navarch puts in a reservation (POSIX user name characters).
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def run_drained_peer_test(
    fleet: str,
    pool: PoolSpec,
    node: str,
    peer: str,
    *,
    base_dir: Path,
    mpi: str = "pmix",
) -> tuple[AcceptanceResult, bool]:
    """run_peer_test for a node drained in Slurm for its acceptance: (the result, whether the
    node is drained again afterwards).

    Slurm never allocates a drained node, even to a job in a reservation (tested on
    Slurm 22.05: "Required node not available (down, drained or reserved)"). So on the
    head node: a maintenance reservation of the node and the peer for the ssh user
    (``scontrol create reservation ... Flags=MAINT,IGNORE_JOBS``, lasting the pool's
    timeout_s plus 5 minutes, so a reservation left behind expires), the node resumed
    (the reservation keeps other jobs off it), the pair run in the reservation, then the
    node drained again and the reservation deleted, whatever the run gave. A step that
    fails gives ``unknown`` naming it; False when the node could not be drained again
    (the caller cordons it anew). Never raises.
    """
    policy = pool.acceptance or AcceptancePolicy()
    test = AcceptanceTest.NCCL_MULTI_NODE
    user = str(dict(pool.ssh).get("user") or "root")
    try:
        if not _USER_NAME.fullmatch(user):
            raise ValueError(f"ssh user {user!r} is not a Slurm user name")
        run, host = _head(fleet, pool, node, peer, base_dir, mpi)
        run = replace(run, reservation=f"navarch-nccl-{node}")
    except (ValueError, ConfigError) as exc:
        return _unknown(test, f"multi-node NCCL not run: {exc}"), True
    scontrol = partial(_scontrol, host)
    minutes = math.ceil(policy.timeout_s / 60) + 5
    scontrol("delete", f"ReservationName={run.reservation}")  # one a killed run left
    failed = scontrol(
        "create",
        "reservation",
        f"ReservationName={run.reservation}",
        f"Nodes={node},{peer}",
        f"Users={user}",
        "StartTime=now",
        f"Duration={minutes}",
        "Flags=MAINT,IGNORE_JOBS",
    )
    if failed:
        return _unknown(test, f"multi-node NCCL not run: {failed}"), True
    try:
        failed = scontrol("update", f"NodeName={node}", "State=RESUME")
        if failed:
            return _unknown(test, f"multi-node NCCL not run: {failed}"), True
        result = run_nccl_multi_node(policy, host, run)
        failed = scontrol(
            "update",
            f"NodeName={node}",
            "State=DRAIN",
            f"Reason=navarch: in acceptance (multi-node NCCL test with {peer} done)",
        )
        return result, not failed
    finally:
        scontrol("delete", f"ReservationName={run.reservation}")


def _scontrol(host: ToolHost, *args: str) -> str:
    """Run scontrol ARGS on host: "" when it succeeded, else what failed, in one line."""
    out = host.run(["scontrol", *args], SCONTROL_TIMEOUT_S)
    if out.exit_code == 0 and not out.timed_out:
        return ""
    why = "timed out" if out.timed_out else f"exit {out.exit_code}"
    return node_text(f"scontrol {' '.join(args[:2])} {why}: {out.stderr or out.stdout}")
