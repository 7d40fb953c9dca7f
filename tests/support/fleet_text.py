"""The smallest valid fleet.yaml, as text, for tests that vary one key of it."""

from __future__ import annotations

from pathlib import Path

#: One local provider, one pool of 1..3 nodes (target 2).
BASE = """\
fleet: demo
providers:
  sim: {type: local}
pools:
  train:
    provider: sim
    instance_types: [sim-h100x8]
    zones: [sim-1a]
    nodes: {min: 1, target: 2, max: 3}
"""


def write_fleet_text(directory: Path, text: str) -> Path:
    """Write `text` as directory/fleet.yaml and return its path."""
    path = directory / "fleet.yaml"
    path.write_text(text)
    return path
