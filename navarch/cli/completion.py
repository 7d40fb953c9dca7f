"""`navarch completion bash|zsh|fish`: the shell's completion script (argcomplete); the
node and pool names it offers come from navarch.cli.completers."""

from __future__ import annotations

import argparse
from typing import Any

from navarch.cli.plumbing import EXIT_OK

__all__ = ["register"]


def cmd_completion(args: argparse.Namespace) -> int:
    """`navarch completion bash|zsh|fish`: the shell's completion script (argcomplete,
    completing from this parser at each TAB)."""
    import argcomplete

    script: str = argcomplete.shellcode(["navarch"], shell=args.shell)  # type: ignore[attr-defined]
    print(script, end="")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add completion to navarch's subparsers."""
    s = sub.add_parser("completion", help="print shell completion for bash, zsh or fish")
    s.add_argument("shell", choices=("bash", "zsh", "fish"))
    s.set_defaults(func=cmd_completion)
