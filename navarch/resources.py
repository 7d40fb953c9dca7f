"""Locate the data directories shipped inside the package (schemas, templates, playbooks).

schemas/, templates/ and playbooks/ live at the top of the repository (the product's
layout) and are the one copy of each file: navarch/_schemas, navarch/_templates and
navarch/_playbooks are symbolic links to them, so setuptools ships their files as package
data (pyproject's [tool.setuptools.package-data]) and every install reads them through
importlib.resources from inside the navarch package: a source checkout, an editable
install, a wheel, `pip install --user` and `pip install --target` alike. No directory
outside the package is read, so another distribution's top-level `schemas/` cannot shadow
navarch's.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

from navarch.errors import ConfigError

__all__ = ["data_dir", "schema_path"]

#: The package's name for each data directory (the links named in the module docstring).
_PACKAGE_DIRS = {"schemas": "_schemas", "templates": "_templates", "playbooks": "_playbooks"}


@cache
def data_dir(name: str) -> Path:
    """Return the directory holding `name` ("schemas", "templates" or "playbooks"), read
    through importlib.resources from the navarch package.

    Raises ConfigError when the package does not carry it as a directory on disk (an
    install missing its package data, or one imported from a zip archive).
    """
    found = files("navarch") / _PACKAGE_DIRS[name]
    if isinstance(found, Path) and found.is_dir():
        return found
    raise ConfigError(
        f"navarch data directory {name!r} not found in the navarch package ({found})",
        hint="reinstall navarch from its wheel or source tree (pip install navarch)",
    )


def schema_path(filename: str) -> Path:
    """Path of one JSON Schema under schemas/, e.g. "fleet.schema.json"."""
    return data_dir("schemas") / filename
