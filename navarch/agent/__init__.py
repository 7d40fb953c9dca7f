"""The node agent: checks the GPUs and writes a signed health report to the object store.

Public API::

    AgentConfig(...)                      # frozen dataclass, see navarch.agent.config
    load_config(path) -> AgentConfig      # YAML, raises ConfigError
    run_once(config, *, now=None) -> dict # one run; returns the signed report

Modules: config, gpu (backends seam + fake), nvml (nvidia-ml-py), kernel_log (XID
parser/readers), checks (pure checks), state (state file), notices (cloud metadata),
runner (one run), templates (cloud-init + systemd units), cli (argparse subcommands).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navarch.agent.config import AgentConfig, load_config

if TYPE_CHECKING:
    from navarch.agent.runner import run_once

__all__ = ["AgentConfig", "load_config", "run_once"]


def __getattr__(name: str) -> Any:
    # The runner (checks, GPU backends, the kernel log parser: 25 ms of imports) is loaded
    # on first use: every navarch command registers the agent's subcommands, few run one.
    if name == "run_once":
        from navarch.agent.runner import run_once

        globals()["run_once"] = run_once
        return run_once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
