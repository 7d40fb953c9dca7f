"""Fixtures for end-to-end runs of the `navarch` CLI on the local provider (in this process
by default, as a subprocess where a test needs one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess as _subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from navarch.fleet.schemas import validator_for
from tests.support.cli import in_process

REPO = Path(__file__).resolve().parents[2]
#: The variables by which navarch.actor recognises a CI job.
CI_VARS = frozenset({"CI", "GITHUB_ACTIONS", "GITLAB_CI"})


@dataclass
class Run:
    code: int
    out: str
    err: str


class Navarch:
    """Runs `navarch ...` in a fleet directory, the way an operator would: `navarch.cli.main`
    in this process with captured output (tests/support/cli.py in_process), or
    `python -m navarch ...` with subprocess=True."""

    def __init__(self, workdir: Path, fleet_file: str = "fleet.yaml") -> None:
        self.workdir = workdir
        self.fleet = fleet_file
        # Neither navarch's own settings nor a CI's identity (navarch.actor reads both):
        # a run is a person's unless a test says otherwise.
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_") and k not in CI_VARS
        }

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        input: str = "",
        subprocess: bool = False,
    ) -> Run:
        if not subprocess:
            return Run(
                *in_process(args, cwd=self.workdir, env={**self.env, **(env or {})}, input=input)
            )
        proc = _subprocess.run(
            [sys.executable, "-m", "navarch", *args],
            cwd=self.workdir,
            input=input,
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=120,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, **kw) -> Run:
        run = self(*args, **kw)
        assert run.code == 0, f"navarch {' '.join(args)} exited {run.code}\n{run.out}\n{run.err}"
        return run

    def status(self) -> dict:
        """`navarch status --json`, checked against schemas/status.schema.json."""
        doc = json.loads(self.ok("status", self.fleet, "--json").out)
        validator_for("status.schema.json").validate(doc)
        return doc

    def nodes(self, pool: str | None = None) -> list[dict]:
        return [n for p in self.status()["pools"] if pool in (None, p["pool"]) for n in p["nodes"]]


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """A directory holding a copy of fleet.example.yaml as fleet.yaml."""
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    return tmp_path


@pytest.fixture
def navarch(fleet_dir: Path) -> Navarch:
    return Navarch(fleet_dir)
