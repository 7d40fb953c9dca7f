"""Which files a candidate fleet.yaml may make navarch open.

A fleet file given as text by someone who cannot read the fleet's directory (an assistant
through navarch.mcp.server's validate_fleet) must not turn validation into a file reader:
every path it names is opened only when it stays inside the served fleet's own directory,
and never when it is a secret (the fleet secret file). The check is made on the path as
written and on where it resolves (symlinks followed), before anything is opened, so a
refused path is never read, nor even tested for existence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Confinement"]


@dataclass(frozen=True)
class Confinement:
    """The directory a candidate's paths must stay in, and the files they may never name.

    root: the served fleet file's directory; forbidden: files no candidate path may
    resolve to (the fleet secret), compared after resolving symlinks.
    """

    root: Path
    forbidden: frozenset[Path] = field(default=frozenset())

    @classmethod
    def beside(cls, fleet_file: Path, forbidden: Iterable[Path | None] = ()) -> Confinement:
        """The confinement of candidates read as if they were `fleet_file`."""
        return cls(
            fleet_file.resolve().parent,
            frozenset(p.resolve() for p in forbidden if p is not None),
        )

    def with_forbidden(self, *paths: Path | None) -> Confinement:
        """This confinement with `paths` forbidden too."""
        more = {p.resolve() for p in paths if p is not None}
        return Confinement(self.root, self.forbidden | more)

    def refusal(self, written: str) -> str | None:
        """Why the path `written` (as the candidate wrote it, relative to root) must not be
        opened, in words for a problem line, or None when it may be. Reads nothing."""
        path = Path(written)
        if path.is_absolute() or written.startswith("~"):
            return f"{written} is an absolute path"
        if ".." in path.parts:
            return f"{written} climbs out of the fleet's directory with .."
        resolved = (self.root / path).resolve()
        if not resolved.is_relative_to(self.root):
            return f"{written} resolves (through a symbolic link) outside the fleet's directory"
        if resolved in self.forbidden:
            return f"{written} is the fleet secret file"
        return None
