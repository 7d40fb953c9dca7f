"""The node agent: checks the GPUs and writes a signed health report to the object store.

Public API::

    AgentConfig(...)                      # frozen dataclass, see navarch.agent.config
    load_config(path) -> AgentConfig      # YAML, raises ConfigError
    run_once(config, *, now=None) -> dict # one run; returns the report (signed when written)

Modules: config (agent.yaml), runner (one run), watch (a long-running agent), checks
(pure checks, a gpud-style table) and plugin_checks (navarch.checks entry points), gpu
(backends seam + fake) and nvml (nvidia-ml-py), kernel_log (XID parser/readers), host (all
of a run's node-local I/O, one seam), notices (cloud metadata), state (what one run hands the
next), store (its own stdlib object-store client), metrics (its Prometheus textfile),
bundle (the zipapp nodes run), install (systemd units), cli (the `navarch agent`
subcommands). The cloud-init and systemd templates are rendered by navarch.agent.bootstrap.
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
