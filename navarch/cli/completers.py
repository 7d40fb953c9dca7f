"""The completers `navarch completion`'s script calls at a TAB (argcomplete): the node and
pool names of the fleet's last state. Below the CLI's plumbing, which attaches them."""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["node_names", "pool_names"]


def _last_state(parsed_args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(node names, pool names) of the fleet's last state (state/<fleet>.json in its store,
    as the last run wrote it) plus the pools fleet.yaml declares; ([], []) when the fleet
    file or the state cannot be read: a TAB prints no error."""
    from navarch.api import known_names

    path = getattr(parsed_args, "fleet", None) or os.environ.get("NAVARCH_FLEET") or "fleet.yaml"
    try:
        nodes, pools = known_names(path)
    except Exception:  # noqa: BLE001 - a completion offers nothing rather than fail
        return [], []
    return list(nodes), list(pools)


def node_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete completer: the nodes of the fleet's last state starting with prefix."""
    return [n for n in _last_state(parsed_args)[0] if n.startswith(prefix)]


def pool_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete completer: the fleet's pools (declared or in its last state) starting
    with prefix."""
    return [p for p in _last_state(parsed_args)[1] if p.startswith(prefix)]
