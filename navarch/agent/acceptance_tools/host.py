"""The node as the acceptance tools see it: run a program, read a text file, list a directory.

``ToolHost`` is the one seam between the acceptance suite and the machine:

- ``SystemToolHost`` runs real programs (argv lists through subprocess, never a shell) and
  reads the real /sys; its ``root`` moves every path under a directory, so a test can hand
  it a fake sysfs tree on disk.
- ``FakeToolHost`` (navarch.agent.acceptance_tools.fake) answers for the local provider and
  the tests in the real tools' formats, so the real parsers run on the local loop too.

Shipped in the agent bundle: Python 3.9 and the standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["NOT_FOUND_EXIT", "SystemToolHost", "ToolHost", "ToolOutput"]

#: What a POSIX shell returns for a command it cannot find; a missing program reads the same.
NOT_FOUND_EXIT = 127

#: Most output kept per stream, in characters: nccl-tests and nvbandwidth print a few KB,
#: dcgmi's level 3 JSON for 8 GPUs tens of KB; a runaway tool must not fill the agent's memory.
OUTPUT_MAX_CHARS = 4 * 1024 * 1024


@dataclass(frozen=True)
class ToolOutput:
    """One program's run: exit_code (NOT_FOUND_EXIT when the program is missing), its
    stdout and stderr (text, capped at OUTPUT_MAX_CHARS), and timed_out (killed at the
    timeout; exit_code is then -9)."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def missing(self) -> bool:
        """True when the program is not installed (exit 127, the shell's word for it)."""
        return self.exit_code == NOT_FOUND_EXIT and not self.timed_out


class ToolHost(Protocol):
    """What the acceptance tests need from the node."""

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        """Run argv (argv[0] found on PATH; no shell) for at most timeout_s seconds.

        Never raises for the program's own failure: a missing program is exit
        NOT_FOUND_EXIT, a timeout is ``timed_out``."""
        ...

    def read_text(self, path: str) -> str:
        """The text of an absolute path (e.g. /sys/class/infiniband/mlx5_0/ports/1/rate).

        Raises OSError when it cannot be read (FileNotFoundError when absent)."""
        ...

    def list_dir(self, path: str) -> tuple[str, ...]:
        """The names in a directory, sorted. Raises OSError when it cannot be listed."""
        ...


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text[:OUTPUT_MAX_CHARS]


class SystemToolHost:
    """The real machine. root: prefix of every path read (default "/": the real /sys)."""

    def __init__(self, root: str = "/") -> None:
        self.root = root

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        """See ToolHost.run. stdin is /dev/null; the environment is the agent's."""
        from navarch.agent.deadline import run_program

        try:
            done = run_program(list(argv), timeout_s)
        except FileNotFoundError as exc:
            return ToolOutput(NOT_FOUND_EXIT, stderr=f"{argv[0]}: {exc.strerror}")
        except PermissionError as exc:
            return ToolOutput(126, stderr=f"{argv[0]}: {exc.strerror}")
        return ToolOutput(
            done.returncode, _text(done.stdout), _text(done.stderr), timed_out=done.timed_out
        )

    def read_text(self, path: str) -> str:
        """See ToolHost.read_text (UTF-8, undecodable bytes replaced)."""
        with open(self._path(path), encoding="utf-8", errors="replace") as fh:
            return fh.read(OUTPUT_MAX_CHARS)

    def list_dir(self, path: str) -> tuple[str, ...]:
        """See ToolHost.list_dir."""
        return tuple(sorted(os.listdir(self._path(path))))
