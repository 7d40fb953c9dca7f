"""Every template renders through one jinja2 environment helper (navarch.templating), whose
StrictUndefined makes a variable a caller forgot an error, never an empty string in a boot
script, a shell command or a page."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

from navarch.templating import environment

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))


#: The filters navarch's renderers add (navarch.reconcile.render, navarch.agent.bootstrap), as
#: stand-ins: only whether a missing variable stops the render is in question here.
FILTERS = {"md": str, "code_line": str, "shquote": str}


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_shipped_template_rendered_without_its_variables_is_an_error(name: str) -> None:
    template = environment(trim_blocks=True, filters=FILTERS).get_template(name)
    # tojson of an undefined value fails as a TypeError naming the StrictUndefined.
    with pytest.raises((jinja2.UndefinedError, TypeError), match="undefined|Undefined"):
        template.render()


def test_a_playbook_step_missing_a_variable_is_an_error_not_an_empty_word() -> None:
    step = environment(from_templates=False).from_string("scontrol update NodeName={{ node }}")
    with pytest.raises(jinja2.UndefinedError):
        step.render()


def test_no_module_builds_a_jinja2_environment_of_its_own() -> None:
    builders = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "navarch").rglob("*.py")
        if re.search(r"\bEnvironment\(", p.read_text()) and p.name != "templating.py"
    )
    assert not builders, f"use navarch.templating.environment in {builders}"
