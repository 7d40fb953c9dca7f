"""The getting-started pages hold together: README's first screen states the Python the
reconciler needs (pyproject's requires-python) and links every page; each page says what
to do on an older Python; the fleet.yaml each page shows passes `navarch validate`. (The
AWS page's commands run end to end in test_getting_started_aws.py.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from navarch import api

REPO = Path(__file__).resolve().parents[2]
PAGES = REPO / "docs" / "getting-started"
CLOUDS = ("aws", "gcp", "azure", "lambda")


def test_readme_first_screen_states_the_python_the_reconciler_needs() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    version = requires.removeprefix(">=")
    first_screen = "\n".join((REPO / "README.md").read_text().splitlines()[:20])
    assert f"Python {version} or newer" in first_screen
    for cloud in CLOUDS:
        assert f"docs/getting-started/{cloud}.md" in first_screen


@pytest.mark.parametrize("cloud", CLOUDS)
def test_each_page_says_the_python_and_what_to_do_on_an_older_one(cloud: str) -> None:
    page = (PAGES / f"{cloud}.md").read_text()
    assert "Python 3.11 or newer" in page
    assert "--python python3.11" in page and "--python 3.11" in page  # pipx and uv
    assert "mode: observe" in page and "mode: full" in page
    assert "../adopt.md" in page


@pytest.mark.parametrize("cloud", ("gcp", "azure", "lambda"))
def test_the_fleet_yaml_each_page_shows_validates(cloud: str, tmp_path: Path) -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", (PAGES / f"{cloud}.md").read_text(), re.S)
    (tmp_path / "fleet.yaml").write_text(block)
    result = api.validate(tmp_path / "fleet.yaml")
    assert result.ok, result.problems
