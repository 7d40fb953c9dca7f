"""fleet.yaml health.remedies: rows load into the pool's HealthPolicy, and each bad row is
refused with the file, its key path and what to do."""

from __future__ import annotations

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.report.health import Remedy
from tests.support.fleet_text import BASE, write_fleet_text


def _with_rows(rows: str, extra: str = "") -> str:
    return BASE.replace("max: 3}\n", f"max: 3}}\n    health:\n{extra}      remedies:\n{rows}")


def test_remedies_rows_load_in_order_with_their_defaults(tmp_path) -> None:
    text = _with_rows(
        "        - {match: xid:79, actions: [reboot, replace], max_in_place: 1,"
        " ladder_window: 7d, source: runbook 12}\n"
        "        - {match: nvlink, actions: [alert]}\n"
        "        - {match: rule:hot, wait: 5m, occurrences: 3}\n",
        extra="      rules:\n        - {name: hot, when: 'health_score < 10', status: unhealthy}\n",
    )
    rows = load_fleet(write_fleet_text(tmp_path, text)).pool("train").health.remedies
    assert [r.match for r in rows] == ["xid:79", "nvlink", "rule:hot"]
    first, second, third = rows
    assert first.actions == (Remedy.REBOOT, Remedy.REPLACE)
    assert (first.max_in_place, first.ladder_window_s, first.source) == (1, 604800, "runbook 12")
    assert second.alert and second.actions == ()
    assert (third.wait_s, third.occurrences) == (300, 3)
    assert third.source == "fleet.yaml pools.train.health.remedies[2]"


@pytest.mark.parametrize(
    ("rows", "key_path", "words"),
    [
        (
            "        - {match: 'XID 79'}\n",
            "pools.train.health.remedies[0].match",
            "not a fault kind or class",
        ),
        ("        - {match: 'xid:abc'}\n", "pools.train.health.remedies[0].match", "no XID code"),
        (
            "        - {match: 'rule:nope'}\n",
            "pools.train.health.remedies[0].match",
            "names no health rule",
        ),
        (
            "        - {match: xid:79}\n        - {match: xid:79, actions: [replace]}\n",
            "pools.train.health.remedies[1].match",
            "two rows match",
        ),
        (
            "        - {match: xid:79, actions: [alert, reboot]}\n",
            "pools.train.health.remedies[0].actions",
            "alert cannot be combined",
        ),
        (
            "        - {match: xid:79, actions: [replace, reboot]}\n",
            "pools.train.health.remedies[0].actions",
            "cheapest to strongest",
        ),
        (
            "        - {match: xid:79, ladder_window: 0s}\n",
            "pools.train.health.remedies[0].ladder_window",
            "longer than 0s",
        ),
        (
            "        - {match: xid:79, actions: [restart]}\n",
            "pools.train.health.remedies[0].actions[0]",
            "",
        ),
        (
            "        - {match: xid:79, max_in_place: -1}\n",
            "pools.train.health.remedies[0].max_in_place",
            "",
        ),
        (
            "        - {match: xid:79, occurences: 2}\n",
            "pools.train.health.remedies[0].occurences",
            "did you mean `occurrences`",
        ),
    ],
)
def test_a_bad_remedies_row_is_refused_naming_its_key_path(tmp_path, rows, key_path, words):
    path = write_fleet_text(tmp_path, _with_rows(rows))
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    assert err.value.key_path == key_path, str(err.value)
    assert err.value.file == str(path)
    assert words in str(err.value)
    assert err.value.hint, "the error says what to do"
