"""`navarch simulate` on a terminal: a progress bar on stderr while it runs (as `apply`
shows), and with a bare --compare each policy's summary reaches stdout as soon as that
policy finishes, not all at the end, even when stdout is a pipe."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from navarch.cli import main
from navarch.simulate import engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Pipe(io.StringIO):
    """A pipe's stdout: what has been flushed is what a reader has seen."""

    seen = ""

    def flush(self) -> None:
        self.seen = self.getvalue()


def _tiny(tmp_path: Path) -> Path:
    """A 5 minute run of a 2-node fleet (tests/simulate/scenarios/fleet-20.yaml, made small
    for this test)."""
    fleet = tmp_path / "fleet-2.yaml"
    fleet.write_text(
        (Path(__file__).parent / "scenarios" / "fleet-20.yaml")
        .read_text()
        .replace("{min: 16, target: 20, max: 24}", "{min: 1, target: 2, max: 6}")
    )
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(
        f"name: tiny\nfleet: {fleet}\nduration: 5m\nreconcile_period: 1m\n"
        "agent_period: 30s\nseed: 3\n"
    )
    return scenario


def test_simulate_shows_a_progress_bar_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert main(["simulate", str(_tiny(tmp_path))]) == 0
    assert "simulating tiny" in err.getvalue()
    assert "6/6" in err.getvalue()  # a tick a minute for 5 minutes, the first at 0


def test_compare_prints_each_policy_as_it_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _Pipe()
    monkeypatch.setattr(sys, "stdout", out)
    seen_at_start: list[str] = []
    real = engine.simulate

    def watched(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen_at_start.append(out.seen)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "simulate", watched)
    assert main(["simulate", str(_tiny(tmp_path)), "--compare"]) == 0
    assert len(seen_at_start) == 4
    assert seen_at_start[0] == ""
    for i in range(1, 4):
        # When policy i starts, the summaries of the i before it have been written out.
        assert seen_at_start[i].count("scenario tiny/") == i, seen_at_start[i]
