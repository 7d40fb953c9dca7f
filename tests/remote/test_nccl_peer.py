"""The two-node NCCL run's commands: srun's argv and the Kubernetes MPIJob manifest (the run
through real Slurm is tests/slurm/test_nccl_multinode.py)."""

from __future__ import annotations

import pytest
import yaml

from navarch.agent.acceptance_tools import FakeToolHost
from navarch.remote.nccl_peer import PeerRun, kubernetes_mpijob, run_nccl_multi_node, srun_argv
from navarch.report.acceptance import AcceptancePolicy, AcceptanceStatus


def test_srun_pins_one_rank_per_gpu_on_the_node_and_its_peer() -> None:
    run = PeerRun("gpu-7", "gpu-2", gpus_per_node=8, message_bytes=16 << 30, iterations=50)
    assert srun_argv(run) == [
        "srun",
        "-N2",
        "-w",
        "gpu-7,gpu-2",
        "--ntasks-per-node=8",
        "--mpi=pmix",
        "all_reduce_perf",
        *("-b", str(16 << 30), "-e", str(16 << 30), "-f", "2", "-g", "1", "-n", "50", "-c", "1"),
    ]


@pytest.mark.parametrize(
    ("node", "peer", "words"),
    [
        ("gpu-1,gpu-9", "gpu-2", "not a host name"),
        ("gpu-1", "$(id)", "not a host name"),
        ("gpu-1", "gpu-1", "another node"),
    ],
)
def test_a_node_name_that_could_leave_its_word_is_refused(node: str, peer: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        PeerRun(node, peer, gpus_per_node=8)


def test_the_mpijob_pins_its_workers_to_the_node_and_the_peer() -> None:
    run = PeerRun("gpu-7", "gpu-2", gpus_per_node=8)
    doc = yaml.safe_load(
        kubernetes_mpijob(run, name="nccl-gpu-7", namespace="train", image='r/x:1"\n- evil')
    )
    assert (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert doc["metadata"] == {
        "name": "nccl-gpu-7",
        "namespace": "train",
        "labels": {
            "app.kubernetes.io/managed-by": "navarch",
            "navarch/acceptance": "nccl_multi_node",
        },
    }
    specs = doc["spec"]["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["image"] == 'r/x:1"\n- evil'  # one string, whatever it holds
    assert launcher["command"][:3] == ["mpirun", "-np", "16"]
    assert launcher["command"][5:] == ["all_reduce_perf", *run.tool_args()]
    worker = specs["Worker"]["template"]["spec"]
    assert specs["Worker"]["replicas"] == 2
    term = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["gpu-7", "gpu-2"]
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    with pytest.raises(ValueError, match="DNS label"):
        kubernetes_mpijob(run, name="Bad_Name", namespace="train", image="x")


def test_srun_missing_or_hung_on_the_head_node_is_unknown() -> None:
    run = PeerRun("gpu-7", "gpu-2", gpus_per_node=8)
    missing = run_nccl_multi_node(AcceptancePolicy(), FakeToolHost(), run)  # no srun in the fake
    assert missing.status is AcceptanceStatus.UNKNOWN and "srun is not installed" in missing.reason
