"""``python -m navarch.agent run --once ...``: the agent's commands without the reconciler's CLI.

Same arguments and exit codes as ``navarch agent ...`` (navarch.agent.cli); this entry
point imports only the agent, which keeps a timer tick cheap on GPU nodes.
"""

from __future__ import annotations

import argparse
import sys

from navarch.agent.cli import register


def main(argv: list[str] | None = None, *, bundled: bool = False) -> int:
    """Parse ``run`` / ``install`` arguments as ``navarch agent`` would and run the handler.
    argv may start with ``agent`` (``navarch agent run --once`` as typed on a node, through
    the ``navarch`` command the user-data installs beside the bundle). bundled: the
    zipapp's entry point (only run and watch, see navarch.agent.cli.register)."""
    parser = argparse.ArgumentParser(
        prog="navarch-agent.pyz" if bundled else "python -m navarch.agent"
    )
    register(parser.add_subparsers(dest="command", required=True), bundled=bundled)
    given = list(sys.argv[1:] if argv is None else argv)
    # `navarch agent run ...` on a node runs this (the `navarch` the user-data installs):
    # the command words a full install takes are accepted as they are.
    if given[:1] == ["agent"]:
        given = given[1:]
    args = parser.parse_args(["agent", *given])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
