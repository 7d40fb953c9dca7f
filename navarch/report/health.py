"""The health vocabulary shared by the agent, the reconciler and the planner.

Three words, each with one documented order, serialised by name (their ``value``):

- ``Status``: how a check, a report or a node stands. One order, worst last:
  ``healthy < degraded < unknown < unhealthy``. ``unknown`` ranks above ``degraded``
  because it means "nobody can vouch for this node", and below ``unhealthy`` because
  doubt never terminates (docs/design.md, Safety rules, rule 2).
- ``Remedy``: the rungs of the remediation ladder, ordered by strength:
  ``none < restart_app < reset_gpu < reboot < replace``. The XID catalogue
  (navarch.report.xid) recommends one per fault; the planner's ladder (navarch.planner.ladder)
  alone decides which one a node gets.
- ``FaultKey``: what makes two faults "the same": a ``kind`` (``xid:79``, ``sxid:20034``,
  ``ecc:dbe``, ``gpu_lost``, ``thermal``, ``dcgmi diag``, ``rule:NAME``...) and the GPU
  index as its own field. ``format``/``parse`` are the one text form (``xid:79@gpu3``).

This module is shipped to GPU nodes (Python 3.9): no ``match``, no ``X | Y`` outside
annotations, ``StrEnum`` from navarch.report.compat.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from navarch.report.compat import StrEnum, renamed_value

__all__ = ["FAULT_KIND_PATTERN", "FaultKey", "Remedy", "Status", "fault_kind"]


class Status(StrEnum):
    """Health of a check, a report or a node; ordered by ``rank``:
    healthy < degraded < unknown < unhealthy (see the module docstring)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNKNOWN = "unknown"
    UNHEALTHY = "unhealthy"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 (healthy) .. 3 (unhealthy)."""
        return _STATUS_RANK[self]

    @classmethod
    def worst(cls, statuses: Iterable[Status]) -> Status:
        """The worst status of the iterable (healthy for an empty one)."""
        return max(statuses, key=_status_rank, default=cls.HEALTHY)


class Remedy(StrEnum):
    """A rung of the remediation ladder, ordered by strength (``rank``):
    none < restart_app < reset_gpu < reboot < replace. On cloud VMs a GPU reset is
    ``nvidia-smi -r`` on the drained node; replace is terminate plus a new node."""

    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    REPLACE = "replace"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 (none) .. 4 (replace)."""
        return _REMEDY_RANK[self]

    @classmethod
    def strongest(cls, remedies: Iterable[Remedy]) -> Remedy:
        """The strongest remedy of the iterable (none for an empty one)."""
        return max(remedies, key=_remedy_rank, default=cls.NONE)


_STATUS_RANK: dict[Status, int] = {s: n for n, s in enumerate(Status)}
_REMEDY_RANK: dict[Remedy, int] = {r: n for n, r in enumerate(Remedy)}


# The rank lookups as C-level callables: worst and strongest run over every check of
# every report, and a Python key function costs a frame per check.
_status_rank = _STATUS_RANK.__getitem__
_remedy_rank = _REMEDY_RANK.__getitem__


_GPU_SEP = "@gpu"

#: The grammar of a reported fault kind (schemas/health-report.schema.json's
#: checks[].fault_key.kind): a key, never prose, so a node cannot put a terminal escape, a
#: line break or an invisible character into every place the ladder names its fault.
FAULT_KIND_PATTERN = r"^[a-z0-9_.:-]+$"
FAULT_KIND_MAX_CHARS = 128
_NOT_KIND = re.compile(r"[^a-z0-9_.:-]")


def fault_kind(text: str) -> str:
    """``text`` as a fault kind of FAULT_KIND_PATTERN: lower case, each other character
    "_", at most FAULT_KIND_MAX_CHARS; "unknown" for empty text. The agent names a check's
    fault by it (a plugin check is named after its entry point, which may be any text)."""
    return _NOT_KIND.sub("_", text.lower())[:FAULT_KIND_MAX_CHARS] or "unknown"


@dataclass(frozen=True)
class FaultKey:
    """A fault's identity: ``kind`` (e.g. ``xid:79``, ``ecc:dbe``, ``gpu_lost``) and the
    index of the GPU it was seen on (None for a node-wide fault).

    Two faults are "the same" for the ladder and the lemon count when their kinds are
    equal (``same_as``): a fault that moves to another GPU of the node is still the node's
    fault coming back. The report carries it as ``{"kind": ..., "gpu_index": ...}``
    (``to_json``); Memory and plans as one string (``format``: ``xid:79@gpu3``).
    """

    kind: str
    gpu_index: int | None = None

    def same_as(self, other: FaultKey) -> bool:
        """True when both keys name the same kind of fault (the GPU index is not compared)."""
        return self.kind == other.kind

    def format(self) -> str:
        """The one text form: ``kind`` or ``kind@gpuN``; ``parse`` is its inverse."""
        return self.kind if self.gpu_index is None else f"{self.kind}{_GPU_SEP}{self.gpu_index}"

    def __str__(self) -> str:
        return self.format()

    @classmethod
    def parse(cls, text: str) -> FaultKey:
        """Inverse of ``format``. Any other text (state written by an older navarch, e.g.
        "XID 79") is a kind of its own, so it still loads; a kind under the feature's old
        word reads as today's (report.compat.renamed_value). Never raises."""
        kind, sep, index = text.rpartition(_GPU_SEP)
        if sep and kind and index.isdigit():
            return cls(renamed_value(kind) or kind, int(index))
        return cls(renamed_value(text) or text)

    def to_json(self) -> dict[str, Any]:
        """The report's ``fault_key`` object (schemas/health-report.schema.json)."""
        return {"kind": self.kind, "gpu_index": self.gpu_index}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FaultKey:
        """Inverse of ``to_json``. Raises KeyError/TypeError on a malformed object (the
        report schema rules those out before this is called)."""
        index = doc.get("gpu_index")
        return cls(str(doc["kind"]), int(index) if index is not None else None)
