"""The local provider's acceptance answers: what a local node's acceptance tools report
on its next acceptance (`navarch local inject NODE --acceptance KEY=VALUE`).

They are kept in the machine's directory as ``acceptance.json``, the JSON object the
agent's fake tools read (AgentConfig.acceptance_file, navarch.agent.acceptance). The run of
the current boot is kept by the agent, so an answer takes effect on the node's next
acceptance: its first boot when injected after `apply` launched it and before its first
`navarch local tick`, else after its next reboot or GPU reset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from navarch.agent.acceptance_tools.fake import FAKE_KEYS, check_override
from navarch.errors import ConfigError
from navarch.fleet.spec import FleetSpec
from navarch.providers.local import write_json_atomic
from navarch.report.acceptance import AcceptancePolicy

__all__ = ["ACCEPTANCE_FILE", "parse_answers", "pool_acceptance", "write_answers"]

#: The file in a local machine's directory the agent's fake tools read.
ACCEPTANCE_FILE = "acceptance.json"


def parse_answers(pairs: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE strings -> {key: value text}, each checked by the fake tools' own rule
    (navarch.agent.acceptance_tools.fake.check_override: the keys FakeToolHost models).
    Raises ConfigError naming --acceptance and the pair for an unknown key or a bad value."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key, text = key.strip(), text.strip()
        if not sep:
            raise ConfigError(
                f"--acceptance {pair!r}: expected KEY=VALUE",
                key_path="--acceptance",
                hint=f"keys: {', '.join(FAKE_KEYS)}",
            )
        try:
            check_override(key, text)
        except ValueError as exc:
            raise ConfigError(
                f"--acceptance {pair!r}: {exc}",
                key_path="--acceptance",
                hint=f"keys: {', '.join(FAKE_KEYS)} (docs/acceptance.md)",
            ) from exc
        out[key] = text
    return out


def write_answers(path: Path, answers: Mapping[str, Any]) -> str:
    """Merge answers into the machine's acceptance file; the line saying so."""
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    if not isinstance(current, dict):
        current = {}
    current.update(answers)
    write_json_atomic(path, current)
    said = ", ".join(f"{k}={v}" for k, v in sorted(answers.items()))
    return f"acceptance tools will report {said} on the next acceptance"


def pool_acceptance(spec: FleetSpec, pool_name: str) -> AcceptancePolicy | None:
    """The pool's AcceptancePolicy (None: the pool has none, or is no longer declared)."""
    for pool in spec.pools:
        if pool.name == pool_name:
            return pool.acceptance
    return None
