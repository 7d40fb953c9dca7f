"""The two-node NCCL acceptance run through a real Slurm 22.05: `srun -N2 -w NODE,PEER` on a
two-node cluster (two slurmd on this host), with a stand-in `all_reduce_perf` that prints
nccl-tests' output format from rank 0, as the MPI build does."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from navarch.agent.acceptance_tools import SystemToolHost
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.inventory import Instance
from navarch.outcome import OutcomeKind
from navarch.planner.acceptance import run_key
from navarch.planner.model import Action, ActionKind, ActionReason, Cordon, Memory, NodeMemory, Plan
from navarch.planner.payloads import PeerPayload
from navarch.reconcile.executor import Executor
from navarch.reconcile.handlers import Handlers
from navarch.reconcile.state import AuditLog
from navarch.remote.nccl_peer import PeerRun, run_nccl_multi_node, run_peer_test
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceRun,
    AcceptanceStatus,
    SuiteDepth,
)
from navarch.report.timefmt import ts
from navarch.stores.file import FileStore
from tests.planner import builders
from tests.support.slurm import SlurmCluster, start_slurm
from tests.support.sshd import Sshd, free_port, require_sshd, start_sshd

REPO = Path(__file__).resolve().parents[2]

NODE, PEER = "demo-train-0003", "demo-train-0001"
#: The node's acceptance cordon, as the executor records it.
IN_ACCEPTANCE = Cordon(ActionReason.ACCEPTANCE, datetime(2026, 11, 1, 12, 0, tzinfo=UTC))

#: nccl-tests 2.19 layout (src/util.cu); the 2-node p4dn figure of NVIDIA/nccl issue #527
#: (57.17 GB/s busbw at 1 GiB) is the default, NAVARCH_STANDIN_BUSBW overrides it.
STANDIN = r"""
import os, sys
rank = os.environ.get("SLURM_PROCID", "0")
with open(os.path.join(os.environ["NAVARCH_STANDIN_DIR"], "rank-" + rank), "w") as fh:
    fh.write(os.environ.get("SLURMD_NODENAME", "?") + " " + " ".join(sys.argv[1:]))
if rank != "0":
    sys.exit(0)
busbw = float(os.environ.get("NAVARCH_STANDIN_BUSBW", "57.17"))
size = int(sys.argv[sys.argv.index("-b") + 1])
ranks = int(os.environ.get("SLURM_NTASKS", "2"))
algbw = busbw * ranks / (2 * (ranks - 1))
half = "%9.1f %7.2f %7.2f %6d" % (size / algbw / 1e3, algbw, busbw, 0)
print("# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703")
print("# Collective test starting: all_reduce_perf")
print("#       size         count      type   redop    root     time   algbw   busbw #wrong"
      "     time   algbw   busbw #wrong")
print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
      "            (us)  (GB/s)  (GB/s)")
print("%12d %13d     float     sum      -1 %s %s" % (size, size // 4, half, half))
print("# Out of bounds values : 0 OK")
print("# Avg bus bandwidth    : %g" % busbw)
print("#")
print("# Collective test concluded: all_reduce_perf")
"""


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with start_slurm(tmp_path_factory.mktemp("slurm2"), NODE, peers=(PEER,)) as cluster:
        yield cluster


@pytest.fixture
def standin(tmp_path: Path, two_nodes: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory with the stand-in all_reduce_perf, on PATH for srun (which passes
    its environment to the tasks), and the cluster's SLURM_CONF."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "all_reduce_perf"
    tool.write_text(f"#!{sys.executable}\n{STANDIN}")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(two_nodes.conf))
    monkeypatch.setenv("NAVARCH_STANDIN_DIR", str(tmp_path))
    return tmp_path


RUN = PeerRun(NODE, PEER, gpus_per_node=1, iterations=20, mpi="none")


def test_srun_runs_all_reduce_perf_on_the_node_and_its_peer_and_the_figure_is_judged(
    standin: Path,
) -> None:
    policy = AcceptancePolicy(nccl_multi_node_min_busbw_gbps=50.0, timeout_s=60)
    result = run_nccl_multi_node(policy, SystemToolHost(), RUN)
    assert (result.status, result.figure, result.threshold) == (AcceptanceStatus.PASS, 57.17, 50.0)
    assert result.test == "nccl_multi_node" and result.tool_version == "2.19.6"
    assert result.detail["node"] == NODE and result.detail["peer"] == PEER
    ran = sorted((standin / f"rank-{r}").read_text().split()[0] for r in (0, 1))
    assert ran == sorted([NODE, PEER])
    args = (standin / "rank-0").read_text().split()[1:]
    assert args == [
        "-b",
        str(1 << 30),
        "-e",
        str(1 << 30),
        "-f",
        "2",
        "-g",
        "1",
        "-n",
        "20",
        "-c",
        "1",
    ]


def test_a_slow_pair_fails_the_multi_node_floor(
    standin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_STANDIN_BUSBW", "29.61")
    policy = AcceptancePolicy(nccl_multi_node_min_busbw_gbps=50.0, timeout_s=60)
    result = run_nccl_multi_node(policy, SystemToolHost(), RUN)
    assert (result.status, result.figure) == (AcceptanceStatus.FAIL, 29.61)
    assert "below the floor 50 GB/s" in result.reason


def test_all_reduce_perf_missing_on_the_nodes_is_unknown(
    standin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (standin / "bin" / "all_reduce_perf").unlink()
    result = run_nccl_multi_node(AcceptancePolicy(timeout_s=60), SystemToolHost(), RUN)
    assert result.status is AcceptanceStatus.UNKNOWN
    assert "all_reduce_perf exited" in result.reason


@pytest.fixture(scope="module")
def head(
    two_nodes: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Sshd, Path]]:
    """An sshd standing for the pool's Slurm head node over the two-node cluster, its
    sessions with the cluster's SLURM_CONF and the stand-in all_reduce_perf on PATH."""
    require_sshd()
    base = tmp_path_factory.mktemp("head")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "all_reduce_perf"
    tool.write_text(f"#!{sys.executable}\n{STANDIN}")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "SLURM_CONF": str(two_nodes.conf),
        "NAVARCH_STANDIN_DIR": str(base),
    }
    with start_sshd(base, env, base) as server:
        yield server, base


def _pool(directory: Path, sshd: Sshd) -> PoolSpec:
    return load_fleet(_fleet(directory, sshd)).pool("train")


def _fleet(directory: Path, sshd: Sshd) -> Path:
    """fleet.example.yaml as directory/fleet.yaml, its train pool a Slurm pool with
    multi-node acceptance whose head node is `sshd`."""
    doc = yaml.safe_load((REPO / "fleet.example.yaml").read_text())
    doc["pools"]["train"].update(
        scheduler="slurm",
        ssh=sshd.ssh(),
        gpus_per_node=1,
        acceptance={"enabled": True, "multi_node": True},
    )
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_executor_runs_the_planners_pair_through_the_pools_head_node(
    head: tuple[Sshd, Path], tmp_path: Path
) -> None:
    sshd, standin_dir = head
    pool = _pool(tmp_path, sshd)
    result = run_peer_test("demo", pool, NODE, PEER, base_dir=tmp_path, mpi="none")
    assert (result.test, result.status, result.figure) == (
        "nccl_multi_node",
        AcceptanceStatus.PASS,
        57.17,
    )
    assert (result.detail["node"], result.detail["peer"], result.detail["ranks"]) == (
        NODE,
        PEER,
        "2",
    )
    ran = sorted((standin_dir / f"rank-{r}").read_text().split()[0] for r in (0, 1))
    assert ran == sorted([NODE, PEER])


def test_a_head_node_navarch_cannot_reach_gives_unknown_not_a_pass(
    head: tuple[Sshd, Path], tmp_path: Path
) -> None:
    sshd, _ = head
    pool = _pool(tmp_path, sshd)
    ssh = dict(pool.ssh, port=free_port())  # nothing listens there
    result = run_peer_test(
        "demo", replace(pool, ssh=ssh), NODE, PEER, base_dir=tmp_path, mpi="none"
    )
    assert result.status is AcceptanceStatus.UNKNOWN
    assert result.figure is None


def _in_acceptance(spec: FleetSpec) -> tuple[dict[str, Instance], Memory, AcceptanceRun]:
    """The node on trial (its single-node suite passed, drained for acceptance) and its peer,
    as the executor finds them: their instances and Memory."""
    now = datetime.now(UTC)
    run = AcceptanceRun(
        "boot-7",
        SuiteDepth.QUICK,
        ts(now),
        ts(now),
        results=(AcceptanceResult("nccl_all_reduce", AcceptanceStatus.PASS, 240.0),),
    )
    report = replace(
        builders.summary(sequence=3, generated_at=now, boot_id="boot-7"), acceptance=run
    )
    instances = {
        name: builders.instance(spec.name, "train", name, launched_at=now, provider="sim")
        for name in (NODE, PEER)
    }
    memory = Memory(fleet=spec.name).with_nodes(
        [
            NodeMemory(NODE, "train", f"i-{NODE}", report=report, cordon=IN_ACCEPTANCE),
            NodeMemory(PEER, "train", f"i-{PEER}"),
        ]
    )
    return instances, memory, run


def test_apply_runs_the_pair_of_a_node_drained_for_acceptance_and_keeps_the_result_for_its_run(
    head: tuple[Sshd, Path],
    two_nodes: SlurmCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sshd, standin_dir = head
    spec = load_fleet(_fleet(tmp_path, sshd))
    two_nodes.run(
        "scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=navarch: in acceptance"
    )
    instances, memory, run = _in_acceptance(spec)
    monkeypatch.setattr(Handlers, "peer_mpi", "none")  # the stand-in Slurm has no PMIx
    action = Action(
        ActionKind.NCCL_PEER,
        "train",
        NODE,
        f"multi-node NCCL all-reduce with the known-good {PEER}",
        payload=PeerPayload(peer=PEER),
        action_reason=ActionReason.ACCEPTANCE_PEER,
    )
    store = FileStore(tmp_path / "store")
    now = datetime.now(UTC)
    executor = Executor(
        spec,
        {},
        AuditLog(store, spec.name, "run-1", now),
        instances=instances,
        inventory=tuple(instances.values()),
        clock=lambda: now,
        run_id="run-1",
    )
    memory, (outcome,) = executor.execute(Plan(spec.name, now, (action,)), memory)

    assert outcome.kind is OutcomeKind.OK, outcome.detail
    assert f"nccl_multi_node with {PEER}: pass 57.17 GB/s" in outcome.detail
    nm = memory.node(NODE)
    assert nm.peer_run == run_key(run) and nm.cordon == IN_ACCEPTANCE
    assert nm.peer_test is not None and (nm.peer_test.status, nm.peer_test.figure) == (
        AcceptanceStatus.PASS,
        57.17,
    )
    ran = sorted((standin_dir / f"rank-{r}").read_text().split()[0] for r in (0, 1))
    assert ran == sorted([NODE, PEER])  # the drained node ran its rank
    # Drained again for the rest of its acceptance, and the reservation is gone.
    assert two_nodes.state(NODE) == "IDLE+DRAIN"
    assert "navarch-nccl" not in two_nodes.run("scontrol", "show", "reservation").stdout
    two_nodes.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
