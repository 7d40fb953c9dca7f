"""Fixtures for the tests against a real Slurm cluster reached over a real sshd.

`slurm_cluster` (session): munged, slurmctld and slurmd for one node named after the
local provider's node demo-train-0002 (tests/support/slurm.py). `slurm_sshd` (session): an
sshd whose sessions get SLURM_CONF through sshd_config SetEnv, so the built-in playbooks'
plain `scontrol` reaches the cluster with nothing added to fleet.yaml or the playbooks;
its PATH holds only the system directories (no stand-ins). `slurm` (per test): the cluster
reset to an IDLE node with no job, and again after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.fleet.load import load_fleet
from navarch.fleet.spec import FleetSpec
from tests.support.slurm import SlurmCluster, start_slurm
from tests.support.sshd import Sshd, require_sshd, start_sshd

#: The Slurm node's name: the local provider's second train node of fleet.example.yaml.
NODE = "demo-train-0002"
REPO = Path(__file__).resolve().parents[2]


def write_slurm_fleet(directory: Path, sshd: Sshd, **health: Any) -> Path:
    """fleet.example.yaml as directory/fleet.yaml, its train pool on `scheduler: slurm`
    with the head node reached through `sshd`; `health` keys override the pool's."""
    doc = yaml.safe_load((REPO / "fleet.example.yaml").read_text())
    train = doc["pools"]["train"]
    train["scheduler"] = "slurm"
    train["ssh"] = sshd.ssh()
    train["health"].update(health)
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def slurm_fleet(directory: Path, sshd: Sshd) -> FleetSpec:
    """The loaded fleet of write_slurm_fleet."""
    return load_fleet(write_slurm_fleet(directory, sshd))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with start_slurm(tmp_path_factory.mktemp("slurm"), NODE) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_sshd(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sshd]:
    require_sshd()
    base = tmp_path_factory.mktemp("slurm-sshd")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "SLURM_CONF": str(slurm_cluster.conf)}
    with start_sshd(base, env, base) as server:
        yield server


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()
