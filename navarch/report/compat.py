"""What the node agent needs from Python 3.11 on the Python 3.9 and 3.10 of GPU images.

The agent bundle (navarch.agent.bundle) runs on the system Python of the common GPU images
(Amazon Linux 2023: 3.9, Ubuntu 22.04: 3.10), so every module it carries keeps to 3.9
(checked with vermin in CI). On 3.11 and later both names are the standard library's own.
"""

from __future__ import annotations

import enum
import sys
from datetime import timezone
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points

__all__ = ["UTC", "RenamedStrEnum", "StrEnum", "entry_points_of", "renamed_value"]

#: datetime.UTC (3.11+) is this very object.
UTC = timezone.utc  # noqa: UP017

if sys.version_info >= (3, 11):  # noqa: UP036 (the agent bundle runs on 3.9)
    from enum import StrEnum  # novermin
else:

    class StrEnum(str, enum.Enum):  # noqa: UP042
        """enum.StrEnum of Python 3.11: members are str, and str()/format() give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list) -> str:
            return name.lower()


#: The feature's word before "acceptance": state, plans and fleet files written by an
#: earlier navarch carry codes such as "burn_in_failed" and "burn_in_held".
_OLD_WORD = "burn_in"
_NEW_WORD = "acceptance"


def renamed_value(value: object) -> str | None:
    """A code written under the feature's old word -> today's code ("burn_in_failed" ->
    "acceptance_failed"); None for anything else. Never raises."""
    if isinstance(value, str) and value.startswith(_OLD_WORD):
        return _NEW_WORD + value[len(_OLD_WORD) :]
    return None


class RenamedStrEnum(StrEnum):
    """A StrEnum that also reads the codes an earlier navarch wrote (renamed_value), so a
    saved state document or fleet file loads unchanged after a rename."""

    @classmethod
    def _missing_(cls, value: object) -> RenamedStrEnum | None:
        new = renamed_value(value)
        return cls(new) if new is not None else None


def entry_points_of(group: str) -> tuple[EntryPoint, ...]:
    """The installed entry points of one group, as found on today's sys.path.

    Read once per group and import path: a scan opens the metadata of every installed
    distribution (about 20 ms), and a run asks for its groups hundreds of times. A plugin
    installed into a directory already on sys.path while the process runs is not seen
    until the next process, as with importlib's own caches."""
    return _entry_points_on(group, tuple(sys.path))


@lru_cache(maxsize=64)
def _entry_points_on(group: str, path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    """entry_points_of's scan; `path` only keys the cache (the scan reads sys.path)
    (``entry_points(group=...)`` is 3.10+; 3.9 returns a dict of every group)."""
    if sys.version_info >= (3, 10):  # noqa: UP036 (the agent bundle runs on 3.9)
        return tuple(entry_points(group=group))  # novermin
    return tuple(entry_points().get(group, ()))
