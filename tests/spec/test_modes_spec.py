"""fleet.yaml `mode:` per pool and per remediation row: loaded as a Mode (full by default),
and a bad value refused by `validate` naming the file, line and key path."""

from __future__ import annotations

import pytest

from navarch import api
from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.fleet.modes import Mode, stricter
from tests.support.fleet_text import BASE, write_fleet_text


def test_a_pool_acts_fully_unless_it_names_a_mode_and_a_row_names_its_own(tmp_path) -> None:
    assert load_fleet(write_fleet_text(tmp_path, BASE)).pool("train").mode is Mode.FULL
    text = BASE.replace(
        "max: 3}\n",
        "max: 3}\n    mode: cordon\n    health:\n      remedies:\n"
        "        - {match: nvlink, mode: observe}\n        - {match: xid:79}\n",
    )
    pool = load_fleet(write_fleet_text(tmp_path, text)).pool("train")
    assert pool.mode is Mode.CORDON
    assert [r.mode for r in pool.health.remedies] == [Mode.OBSERVE, None]


@pytest.mark.parametrize(
    ("extra", "key_path", "line"),
    [
        ("    mode: watch\n", "pools.train.mode", 10),
        (
            "    health:\n      remedies:\n        - {match: xid:79, mode: replace}\n",
            "pools.train.health.remedies[0].mode",
            12,
        ),
    ],
)
def test_validate_refuses_a_bad_mode_naming_its_key_path(tmp_path, extra, key_path, line) -> None:
    path = write_fleet_text(tmp_path, BASE.replace("max: 3}\n", "max: 3}\n" + extra))
    problems = api.validate(path).problems
    assert len(problems) == 1, problems
    assert f"{path}:{line}: {key_path}:" in problems[0]
    assert "'observe', 'cordon', 'full'" in problems[0]
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    assert err.value.key_path == key_path


def test_the_stricter_of_a_pool_and_its_row_wins_and_no_row_grants_more() -> None:
    assert stricter(Mode.FULL, Mode.OBSERVE) is Mode.OBSERVE
    assert stricter(Mode.OBSERVE, Mode.FULL) is Mode.OBSERVE
    assert stricter(Mode.CORDON, Mode.FULL) is Mode.CORDON
    assert stricter(Mode.CORDON, None) is Mode.CORDON
