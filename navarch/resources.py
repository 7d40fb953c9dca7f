"""Locate the data directories shipped beside the package (schemas, templates, playbooks).

An editable install (`pip install -e .`) reads them from the repository root; a wheel
install reads them from `<sys.prefix>/share/navarch/` where pyproject's data-files put them.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

from navarch.errors import ConfigError

_REPO_ROOT = Path(__file__).resolve().parent.parent


@cache
def data_dir(name: str) -> Path:
    """Return the directory holding `name` ("schemas", "templates" or "playbooks").

    Raises ConfigError when neither the repository copy nor the installed copy exists.
    """
    for candidate in (_REPO_ROOT / name, Path(sys.prefix) / "share" / "navarch" / name):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"navarch data directory {name!r} not found; reinstall navarch")


def schema_path(filename: str) -> Path:
    """Path of one JSON Schema under schemas/, e.g. "fleet.schema.json"."""
    return data_dir("schemas") / filename
