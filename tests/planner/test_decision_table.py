"""docs/health-policy.md's decision table and catalogue table are the ladder's own."""

from __future__ import annotations

import re
from pathlib import Path

from navarch.planner.ladder import catalogue_table, decision_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "health-policy.md"


def _block(name: str) -> str:
    found = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", DOC.read_text(), re.S)
    assert found is not None, f"docs/health-policy.md lost its {name} block"
    return found.group(1)


def test_docs_decision_table_is_what_the_ladder_decides() -> None:
    assert _block("decision-table") == decision_table()


def test_docs_catalogue_table_is_the_xid_catalogue() -> None:
    assert _block("catalogue-table") == catalogue_table()


def test_decision_table_shows_the_pool_ladder_climbing_from_the_catalogue() -> None:
    rows = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in decision_table().splitlines()[2:]
    }
    assert rows[("reboot", "first occurrence")].endswith("| reboot | reboot | replace |")
    assert rows[("reboot", "again after reboot")].endswith("| replace | replace | replace |")
    assert rows[("reset_gpu", "first occurrence")].endswith("| reboot | reset_gpu | reset_gpu |")
