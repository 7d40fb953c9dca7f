"""docs/api.md runs: every python block, in order, in a directory holding the example fleet;
every function navarch.api supports has its section."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import shutil
from pathlib import Path

import pytest

from navarch import api

REPO = Path(__file__).resolve().parents[2]
API_MD = REPO / "docs" / "api.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", API_MD.read_text(), re.S)


def test_every_supported_function_has_a_section_with_an_example() -> None:
    text = API_MD.read_text()
    functions = [n for n in api.__all__ if inspect.isfunction(getattr(api, n))]
    assert functions, "navarch.api supports no function"
    for name in functions:
        assert any(f"api.{name}(" in b for b in blocks()), f"no example calls api.{name}"
        assert f"`{name}(" in text, f"{name} is missing from the table"
    sections = re.findall(r"^## (\w+)$", text, re.M)
    assert set(sections) == {n for n in functions if n != "validate_text"}


def test_the_examples_run_in_order_on_the_example_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    for key in [k for k in os.environ if k.startswith("NAVARCH_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    printed = []
    for number, block in enumerate(blocks(), 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"docs/api.md block {number}", "exec"), {})  # noqa: S102
        printed.append(out.getvalue())
    assert len(printed) == 17
    assert printed[16].startswith("0 nodes; pools: infer, train")
    assert printed[0].startswith("demo ['train', 'infer']")
    assert "cannot read fleet file" in printed[1]
    assert "fleet.yaml:" in printed[2] and "pools.train.nodes.max" in printed[2]
    assert "provision demo-train-0001 # because" in printed[3]
    assert "5 actions, failed: ()" in printed[4]
    assert "train demo-train-0001 booting" in printed[5]
    assert "provision scheduled # because" in printed[6]
    assert "no fault demo-train-0001 []" in printed[7]  # launched, no fault, nothing held
    assert "Report of fleet demo" in printed[7] and "modes now: pool train full" in printed[7]
    assert printed[8].startswith("Fleet demo paused by alice@laptop at ")
    assert "paused by alice@laptop" in printed[8].splitlines()[1]
    assert printed[8].splitlines()[1].endswith(" 0")
    assert printed[10].startswith("{'verb': 'cordon', 'node': 'demo-train-0002'")
    assert printed[11].startswith("refused: demo-train-0002 has no fresh healthy report")
    assert "--force overrode" in printed[11]
    assert printed[12].startswith("rebooted ")
    assert "fleet demo is not locked" in printed[13]
    assert "no running instance without navarch's tags matches the filter" in printed[14]
    assert printed[15].startswith("fleet demo done: True left: ()")
    assert printed[9].startswith("Fleet demo resumed by alice@laptop")
    assert printed[9].rstrip().endswith("driver rollout, INC-1234")
