"""README's walk-through runs: each `navarch` line of its first `sh` block under "A walk
through the local loop" runs in order on the embedded local provider, exits as its
`# exit N` comment says (0 without one), and prints every `#   ` line shown under it
(`...` stands for anything). The README is read at test time, so when the output changes
only its text needs fixing. The CLI reference lists every command the parser has."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from navarch.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def walkthrough() -> list[tuple[list[str], int, list[str]]]:
    """[(argv after `navarch`, expected exit, expected output lines)] in README order."""
    section = README[README.index("## A walk through the local loop") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    steps: list[tuple[list[str], int, list[str]]] = []
    for line in block[1].splitlines():
        if line.startswith("navarch "):
            command, _, comment = line.partition("#")
            code = re.search(r"\bexit (\d)\b", comment)
            steps.append((shlex.split(command)[1:], int(code[1]) if code else 0, []))
        elif line.startswith("#   ") and steps:
            steps[-1][2].append(line[4:].strip())
    return steps


def _pattern(expected: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in expected.split("...")]
    return re.compile(r"^\s*" + ".*?".join(parts) + r"\s*$", re.M)


def test_readme_walkthrough_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    from tests.cli.conftest import Navarch

    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.example.yaml")
    navarch = Navarch(tmp_path, "fleet.example.yaml")
    steps = walkthrough()
    assert len(steps) >= 10 and any(lines for _, _, lines in steps)
    for i, (argv, code, lines) in enumerate(steps):
        # The first as README's reader runs it, `python -m navarch` in a process of its own;
        # the rest in this process, which answers alike (test_test_tiers.py) in a tenth the time.
        run = navarch(*argv, subprocess=i == 0)
        assert run.code == code, f"navarch {' '.join(argv)} exited {run.code}\n{run.out}{run.err}"
        for expected in lines:
            assert _pattern(expected).search(run.out), (
                f"README shows {expected!r} under `navarch {' '.join(argv)}`; it printed:\n"
                f"{run.out}"
            )


def test_cli_reference_lists_every_command() -> None:
    reference = README[README.index("## CLI reference") :]
    reference = reference[: reference.index("\n## ", 1)]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in sub.choices:
        assert f"`navarch {name}" in reference, f"navarch {name} is missing from the CLI reference"
