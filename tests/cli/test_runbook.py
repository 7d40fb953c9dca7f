"""docs/runbook.md runs: every `navarch` command in its `sh` blocks, run in the state its
section describes, on the embedded local provider, exits as its `# exit N` comment says
(0 without one). The sections the CLI's error lines link to all exist."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.cli import RUNBOOK

REPO = Path(__file__).resolve().parents[2]
RUNBOOK_MD = REPO / "docs" / "runbook.md"


def sections() -> dict[str, list[tuple[list[str], int]]]:
    """anchor -> [(argv after `navarch`, expected exit code)] in document order."""
    out: dict[str, list[tuple[list[str], int]]] = {}
    parts = re.split(r'<a id="([a-z-]+)"></a>', RUNBOOK_MD.read_text())
    for anchor, body in zip(parts[1::2], parts[2::2], strict=True):
        commands = []
        for block in re.findall(r"```sh\n(.*?)```", body, re.S):
            for line in block.splitlines():
                if not line.startswith("navarch "):
                    continue
                command, _, comment = line.partition("#")
                exit_code = re.search(r"exit (\d)", comment)
                commands.append((shlex.split(command)[1:], int(exit_code[1]) if exit_code else 0))
        out[anchor] = commands
    return out


def _edit(fleet_dir: Path, mutate: Callable[[dict[str, Any]], None]) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _lock_id(fleet_dir: Path) -> str:
    return json.loads((fleet_dir / ".navarch" / "store" / "state" / "demo.lock").read_text())[
        "lock_id"
    ]


class Scene:
    """The state a section describes, and what happens in the world between its commands."""

    env: dict[str, str] = {}

    def __init__(self, navarch, fleet_dir: Path) -> None:
        self.navarch, self.fleet_dir = navarch, fleet_dir

    def setup(self) -> None:
        self.navarch.ok("apply", "fleet.yaml", "--auto-approve")
        self.navarch.ok("local", "tick", "fleet.yaml")

    def before(self, index: int, argv: list[str]) -> list[str]:
        """Runs before command `index`; returns its argv with placeholders filled in."""
        return argv


class Breaker(Scene):
    def setup(self) -> None:
        super().setup()
        for node in ("demo-train-0001", "demo-train-0002"):
            self.navarch.ok("local", "inject", "fleet.yaml", node, "--xid", "79")

    def before(self, index: int, argv: list[str]) -> list[str]:
        self.navarch.ok("local", "tick", "fleet.yaml")  # the agents keep reporting
        return argv


class Lease(Scene):
    def setup(self) -> None:
        super().setup()
        from navarch.reconcile.state import acquire_lock
        from navarch.stores.file import FileStore

        store = FileStore(self.fleet_dir / ".navarch" / "store")
        acquire_lock(
            store,
            "demo",
            "apply fleet.yaml",
            3600,
            datetime.now(UTC),
            holder="root@cron-host pid 4242",
        )

    def before(self, index: int, argv: list[str]) -> list[str]:
        if "<LOCK_ID>" in argv:
            return [_lock_id(self.fleet_dir) if a == "<LOCK_ID>" else a for a in argv]
        return argv


class AgentsSilent(Scene):
    def setup(self) -> None:
        self.navarch.ok("apply", "fleet.yaml", "--auto-approve")  # no agent ever reports
        bin_dir = self.fleet_dir / "bin"
        bin_dir.mkdir()
        (bin_dir / "ssh").write_text('#!/bin/sh\necho "ssh $*"\n')
        (bin_dir / "ssh").chmod(0o755)
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}


class Capacity(Scene):
    def setup(self) -> None:
        _edit(
            self.fleet_dir,
            lambda d: d["providers"]["sim"].update(
                unavailable=[
                    f"{z}/{t}" for z in ("sim-1a", "sim-1b") for t in ("sim-h100x8", "sim-a100x8")
                ]
            ),
        )
        assert self.navarch("apply", "fleet.yaml", "--auto-approve").code == 1


class StuckCordoned(Scene):
    def setup(self) -> None:
        super().setup()
        self.navarch.ok("cordon", "fleet.yaml", "demo-train-0002", "--reason", "bad fan")
        self.navarch.ok("local", "tick", "fleet.yaml")


class ReplaceHeld(Scene):
    """demo-train-0001 faults and is cordoned, taking train's max_unavailable (1); the
    operator then raises the budget for the fix's apply."""

    def setup(self) -> None:
        super().setup()
        self.navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79")
        self.navarch.ok("local", "tick", "fleet.yaml")
        self.navarch.ok("apply", "fleet.yaml", "--auto-approve")

    def before(self, index: int, argv: list[str]) -> list[str]:
        if index == 2:
            _edit(
                self.fleet_dir,
                lambda d: d["pools"]["train"]["health"].update(max_unavailable=2),
            )
        return argv


class OrphanGuard(Scene):
    def setup(self) -> None:
        super().setup()

        def remove_infer(d: dict[str, Any]) -> None:
            del d["pools"]["infer"]
            d["safety"]["max_orphan_terminations"] = 1

        _edit(self.fleet_dir, remove_infer)


class MaxLaunches(Scene):
    """train's target raised from 3 to 6 under a cap of 2 launches: the plan wants 3; the
    fix allows that run 3 launches."""

    def setup(self) -> None:
        super().setup()

        def grow(d: dict[str, Any]) -> None:
            d["pools"]["train"]["nodes"] = {"min": 2, "target": 6, "max": 6}
            d["safety"]["max_launches_per_run"] = 2

        _edit(self.fleet_dir, grow)


class DuplicateNode(Scene):
    """demo-train-0001's machine cloned with its tags, and navarch's state lost."""

    def setup(self) -> None:
        super().setup()
        machines = self.fleet_dir / ".navarch" / "local" / "demo" / "machines"
        original = next(
            m for m in machines.iterdir() if '"demo-train-0001"' in (m / "machine.json").read_text()
        )
        self.copy = machines / "i-0c10ned0000000001"
        shutil.copytree(original, self.copy)
        machine = self.copy / "machine.json"
        machine.write_text(machine.read_text().replace(original.name, self.copy.name))
        (self.fleet_dir / ".navarch" / "store" / "state" / "demo.json").unlink()

    def before(self, index: int, argv: list[str]) -> list[str]:
        if index == 3:  # the operator terminated the copy in the cloud's console
            shutil.rmtree(self.copy)
        return argv


class StalePlan(Scene):
    def before(self, index: int, argv: list[str]) -> list[str]:
        if index == 1:  # the world moves on between the plan and its apply
            self.navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79")
            self.navarch.ok("local", "tick", "fleet.yaml")
        return argv


class StoreUnreachable(Scene):
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }

    def setup(self) -> None:
        super().setup()  # the fleet ran on a store that is then out of reach
        _edit(self.fleet_dir, lambda d: d.update(store="s3://navarch-state/demo"))


class BadFleet(Scene):
    def setup(self) -> None:
        path = self.fleet_dir / "fleet.yaml"
        path.write_text(path.read_text().replace("max_unavailable:", "max_unavailabel:", 1))


#: Sections whose stopping error line links to them (capacity fails per action instead).
LINKED = {
    "breaker",
    "lease",
    "orphan-guard",
    "max-launches",
    "replace-held",
    "duplicate-node",
    "stale-plan",
    "store-unreachable",
    "bad-fleet",
}

SCENES: dict[str, type[Scene]] = {
    "breaker": Breaker,
    "lease": Lease,
    "agents-silent": AgentsSilent,
    "capacity": Capacity,
    "stuck-cordoned": StuckCordoned,
    "orphan-guard": OrphanGuard,
    "max-launches": MaxLaunches,
    "replace-held": ReplaceHeld,
    "duplicate-node": DuplicateNode,
    "stale-plan": StalePlan,
    "store-unreachable": StoreUnreachable,
    "bad-fleet": BadFleet,
    "pause": Scene,
}


def test_every_section_has_a_scene_and_commands() -> None:
    found = sections()
    assert sorted(found) == sorted(SCENES)
    assert all(found.values()), [a for a, c in found.items() if not c]


def test_every_section_the_cli_links_to_exists() -> None:
    anchors = set(sections())
    for link in RUNBOOK.values():
        assert link.startswith("docs/runbook.md#") and link.split("#")[1] in anchors, link


@pytest.mark.parametrize("anchor", sorted(SCENES))
def test_runbook_section_commands_run(anchor: str, navarch, fleet_dir: Path) -> None:
    scene = SCENES[anchor](navarch, fleet_dir)
    scene.setup()
    for index, (argv, expected) in enumerate(sections()[anchor]):
        argv = scene.before(index, argv)
        run = navarch(*argv, env=scene.env)
        assert run.code == expected, (
            f"{anchor}: navarch {' '.join(argv)} exited {run.code}, "
            f"the runbook says {expected}\n{run.out}\n{run.err}"
        )
        if expected not in (0, 2) and anchor in LINKED and argv[0] != "validate":
            assert f"docs/runbook.md#{anchor}" in run.err, run.err  # the error names its fix
