"""The local provider's acceptance answers: what a local node's acceptance tools report
on its next burn-in (`navarch local inject NODE --acceptance KEY=VALUE`).

They are kept in the machine's directory as ``acceptance.json``, the JSON object the
agent's fake tools read (AgentConfig.acceptance_file, navarch.agent.burn_in). The run of
the current boot is kept by the agent, so an answer takes effect on the node's next
burn-in: its first boot when injected after `apply` launched it and before its first
`navarch local tick`, else after its next reboot or GPU reset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from navarch.acceptance import AcceptancePolicy
from navarch.errors import ConfigError
from navarch.providers.local import write_json_atomic
from navarch.spec import FleetSpec

__all__ = ["ACCEPTANCE_FILE", "ANSWER_KEYS", "parse_answers", "pool_acceptance", "write_answers"]

#: The file in a local machine's directory the agent's fake tools read.
ACCEPTANCE_FILE = "acceptance.json"


def _gbps(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must be 0 or more")
    return value


def _count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 64:
        raise ValueError("must be 0 to 64")
    return value


def _width(text: str) -> int:
    value = int(text)
    if value not in (1, 2, 4, 8, 16, 32):
        raise ValueError("must be 1, 2, 4, 8, 16 or 32 lanes")
    return value


def _word(text: str) -> str:
    if not text or len(text) > 64:
        raise ValueError("must be 1 to 64 characters")
    return text


#: Each key the fake tools answer, its parser, and what it means.
ANSWER_KEYS: Mapping[str, tuple[Any, str]] = {
    "nccl_busbw_gbps": (_gbps, "NCCL all_reduce_perf bus bandwidth, GB/s"),
    "nvbandwidth_gbps": (_gbps, "nvbandwidth device-to-device bandwidth, GB/s"),
    "dcgm_diag": (_word, "dcgmi diag's verdict: pass, fail (anything else: unknown)"),
    "gpu_count": (_count, "GPUs the driver sees"),
    "pcie_width": (_width, "every GPU's current PCIe link width, lanes"),
    "driver": (_word, "the driver version the node reports"),
}


def parse_answers(pairs: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE strings -> {key: typed value}. Raises ConfigError naming --acceptance and
    the pair for an unknown key or a bad value, with the keys it knows."""
    out: dict[str, Any] = {}
    known = ", ".join(f"{k} ({why})" for k, (_, why) in ANSWER_KEYS.items())
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or key not in ANSWER_KEYS:
            raise ConfigError(
                f"--acceptance {pair!r}: expected KEY=VALUE with a known KEY",
                key_path="--acceptance",
                hint=f"keys: {known}",
            )
        parse = ANSWER_KEYS[key][0]
        try:
            out[key] = parse(text.strip())
        except ValueError as exc:
            raise ConfigError(
                f"--acceptance {pair!r}: {exc}",
                key_path="--acceptance",
                hint=ANSWER_KEYS[key][1],
            ) from exc
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
    return f"acceptance tools will report {said} on the next burn-in"


def pool_acceptance(spec: FleetSpec, pool_name: str) -> AcceptancePolicy | None:
    """The pool's AcceptancePolicy (None: the pool has none, or is no longer declared)."""
    for pool in spec.pools:
        if pool.name == pool_name:
            return pool.acceptance
    return None
