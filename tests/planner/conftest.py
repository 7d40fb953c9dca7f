"""The planner tests share tests/planner/builders.py; with --import-mode=importlib a test
module cannot import a sibling by name, so this directory goes on sys.path once."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
