"""apply's per-action lines are written in batches, in order, and none is lost."""

from __future__ import annotations

import io
from types import SimpleNamespace

from navarch.cli.plumbing import OutcomeLines
from navarch.planner.model import ActionKind


class _Stream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def _outcome(node: str, ok: bool = True) -> SimpleNamespace:
    action = SimpleNamespace(node=node, pool="train", kind=ActionKind.TERMINATE)
    return SimpleNamespace(action=action, ok=ok, detail="done" if ok else "boom")


def test_many_outcomes_inside_one_interval_are_written_in_one_write_on_close() -> None:
    stream, now = _Stream(), [0.0]
    lines = OutcomeLines(stream, clock=lambda: now[0])
    for i in range(1000):
        lines(_outcome(f"n{i}"))
    assert stream.writes == 0
    lines.close()
    assert stream.writes == 1
    text = stream.getvalue().splitlines()
    assert text[0] == "n0: terminate ok: done"
    assert text[-1] == "n999: terminate ok: done"
    assert len(text) == 1000


def test_lines_are_written_once_the_interval_passes_and_keep_their_order() -> None:
    stream, now = _Stream(), [0.0]
    with OutcomeLines(stream, clock=lambda: now[0]) as lines:
        lines(_outcome("a"))
        now[0] += OutcomeLines.FLUSH_EVERY_S
        lines(_outcome("b", ok=False))
        assert stream.getvalue() == "a: terminate ok: done\nb: terminate FAILED: boom\n"
        lines(_outcome("c"))
    assert stream.writes == 2
    assert stream.getvalue().splitlines()[-1] == "c: terminate ok: done"
