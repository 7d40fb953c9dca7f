"""Each command's --help ends with its exit codes and one example (section 4 of the
on-call work: an operator at 3 a.m. reads --help, not the README)."""

from __future__ import annotations

import argparse

#: Each verb's --help ends with its exit codes and one example (section 4 of the on-call
#: work: an operator at 3 a.m. reads --help, not the README).
EPILOGS: dict[str, tuple[str, str]] = {
    "validate": (
        "0 valid; 1 invalid (each problem: file, line, key path; docs/runbook.md#bad-fleet)",
        "navarch validate fleet.yaml",
    ),
    "plan": (
        "0 no changes (or no --detailed-exitcode); 1 error; 2 changes "
        "(--detailed-exitcode); 3 a safety rule stopped something "
        "(docs/runbook.md#breaker)",
        "navarch plan fleet.yaml --detailed-exitcode",
    ),
    "apply": (
        "0 done; 1 an action failed, or a stale saved plan (docs/runbook.md#stale-plan); "
        "3 a safety rule stopped something (docs/runbook.md#breaker); 4 another run "
        "holds the lock, 5 this run lost its lease (docs/runbook.md#lease)",
        "navarch apply fleet.yaml --auto-approve",
    ),
    "destroy": (
        "0 no node left; 1 an action failed; 2 drains still running (run it again, "
        "or --force); 4 another run holds the lock (docs/runbook.md#lease)",
        "navarch destroy fleet.yaml --pool infer --auto-approve",
    ),
    "status": (
        "0 shown; 1 error (store unreachable: docs/runbook.md#store-unreachable)",
        "navarch status fleet.yaml --all",
    ),
    "history": (
        "0 shown; 1 error (store unreachable: docs/runbook.md#store-unreachable)",
        "navarch history fleet.yaml demo-train-0002 --since 7d",
    ),
    "report": (
        "0 shown; 1 error (store unreachable: docs/runbook.md#store-unreachable)",
        "navarch report fleet.yaml --since 7d",
    ),
    "force-unlock": (
        "0 removed; 1 no lock, or another id (docs/runbook.md#lease)",
        "navarch force-unlock fleet.yaml 3f2a9c1b7d4e",
    ),
    "uncordon": (
        "0 returned to service; 1 refused (why is printed) or failed; 4 lock held, "
        "5 lease lost (docs/runbook.md#stuck-cordoned)",
        "navarch uncordon fleet.yaml demo-train-0002",
    ),
    "reboot": (
        "0 rebooted; 1 refused (GPU processes) or failed; 4 lock held, 5 lease lost",
        "navarch reboot fleet.yaml demo-train-0002",
    ),
    "cordon": (
        "0 cordoned; 1 refused or failed; 4 lock held, 5 lease lost",
        "navarch cordon fleet.yaml demo-train-0002 --reason 'ECC errors in jobs'",
    ),
    "mcp": (
        "0 the client closed the session; 1 error (a bad fleet.yaml, or navarch[mcp] "
        "is not installed)",
        "navarch mcp fleet.yaml --allow-actions",
    ),
    "ssh": (
        "0 the session or command succeeded; else ssh's own code (255: could not "
        "connect); 1 the node is not this fleet's or has no address",
        "navarch ssh fleet.yaml demo-train-0002 -- nvidia-smi",
    ),
    "simulate": (
        "0 every assert passed; 1 an assert failed or the scenario is invalid",
        "navarch simulate examples/simulate/steady-state-small.yaml",
    ),
    "completion": ("0 printed", "navarch completion bash > /etc/bash_completion.d/navarch"),
    "local tick": ("0 every node reported; 1 error", "navarch local tick fleet.yaml"),
    "local inject": (
        "0 injected; 1 error",
        "navarch local inject fleet.yaml demo-train-0002 --xid 79 --gpu 3",
    ),
    "local reboot": ("0 rebooted; 1 error", "navarch local reboot fleet.yaml demo-train-0002"),
    "local launch-foreign": ("0 launched; 1 error", "navarch local launch-foreign fleet.yaml"),
    "agent run": (
        "0 report written; non-zero the report could not be written",
        "navarch agent run --once --stdout",
    ),
    "agent install": ("0 installed; 1 error", "navarch agent install --dry-run"),
    "render cloud-init": (
        "0 printed; 1 error",
        "navarch render cloud-init fleet.yaml --pool train",
    ),
}


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's sub-commands by name (argparse keeps them in its sub-parsers action)."""
    for action in p._actions:  # noqa: SLF001 - argparse has no public accessor for these
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def add_epilogs(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give each sub-command in EPILOGS its exit codes and example (recursively)."""
    for name, child in _subcommands(p).items():
        path = f"{prefix}{name}"
        if path in EPILOGS:
            exits, example = EPILOGS[path]
            child.formatter_class = argparse.RawDescriptionHelpFormatter
            child.epilog = f"exit codes: {exits}\nexample:\n  {example}"
        add_epilogs(child, f"{path} ")


TOP_EPILOG = """\
exit codes (what to do for each: docs/runbook.md):
  0  success; plan --detailed-exitcode: no changes
  1  error: bad input or usage, a failed action, a stale saved plan
  2  plan --detailed-exitcode: changes; destroy: drains still running
  3  a safety rule stopped something for a human (circuit breaker, orphan guard)
  4  another run holds the fleet lock
  5  apply lost its lease mid-run

The fleet file defaults to $NAVARCH_FLEET, else ./fleet.yaml.
example:
  navarch plan fleet.yaml && navarch apply fleet.yaml
"""
