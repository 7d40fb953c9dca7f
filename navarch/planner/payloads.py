"""The shapes an Action carries, one per kind (navarch.planner.model.PAYLOAD_TYPES), and
the plain values they hold: the places a provision tries, the fault an action answers, why
a node is diagnosed. Like Terraform's plan, which carries one change shape per action, a
renderer or the executor reads only the fields that go with the kind. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from navarch.report.health import FaultKey, Remedy


@dataclass(frozen=True)
class Fault:
    """A fault the remediation ladder answers, taken from an unhealthy report.

    key: the report's structured fault key (ReportSummary.fault_key; two faults are "the
    same" when their kinds are, FaultKey.same_as); action: the report's recommended remedy
    (ReportSummary.action); boot_id and sequence: the report's, so a later boot is told
    apart.
    """

    key: FaultKey
    action: Remedy
    boot_id: str
    sequence: int


class DiagWhy(enum.StrEnum):
    """Why a node is diagnosed."""

    RETURN = "return"  # return_requires_diag: before a reset or rebooted node returns
    SCHEDULED = "scheduled"  # pool diagnostics.every: cordon, drain, diagnose, uncordon


@dataclass(frozen=True)
class Place:
    """One place a provision may launch in. placement: the index into the pool's
    placements; provider: its provider, set only when the pool has several placements
    (so single-provider plans read as before)."""

    zone: str
    instance_type: str
    spot: bool
    attempt: int  # index of this place in the pool's fallback order (launch id input)
    provider: str = ""
    placement: int = 0

    def label(self) -> str:
        where = f"{self.provider} " if self.provider else ""
        return f"{where}{self.zone}/{self.instance_type}" + (" (spot)" if self.spot else "")

    @staticmethod
    def count(n: int) -> str:
        """n places as plan and outcome lines say it: "1 zone/type", "3 zones/types"."""
        return f"{n} {'zone/type' if n == 1 else 'zones/types'}"


@dataclass(frozen=True)
class ProvisionPayload:
    """What a PROVISION launches: places in the order they will be tried; replaces: the
    node it stands in for (None: a scale up); avoid_hosts: physical hosts not to land on
    (the pool's lemon hosts) and block: the topology block to land in ("" anywhere), both
    decided by navarch.planner.hosts."""

    places: tuple[Place, ...] = ()
    replaces: str | None = None
    avoid_hosts: tuple[str, ...] = ()
    block: str = ""


@dataclass(frozen=True)
class CordonPayload:
    """What a CORDON records. repair: it starts a repair (counts toward the hourly limit);
    fault: the fault it answers (recorded in Memory); level, why: the dcgmi diag level and
    DiagWhy of a cordon for scheduled diagnostics; idle: the node serves nothing (a warm
    spare, a node in acceptance), so its leaving takes no place of the serving nodes'
    max_unavailable (NodeMemory.idle_cordon)."""

    repair: bool = False
    fault: Fault | None = None
    level: int | None = None
    why: DiagWhy | None = None
    idle: bool = False


@dataclass(frozen=True)
class TerminatePayload:
    """How a TERMINATE ends. backoff: back off the instance's place (it never came up);
    lemon: its instance id is remembered in PoolMemory as a lemon's; fault: the fault it
    answers; hand_back: the node leaves for a hardware fault, so its host is handed back to
    the cloud where the provider can (Capability.REPORT_FAULTY_HOST); after: the node
    whose provision (this node's replacement) runs first, the termination following only
    once that launch found room ("" for none; navarch.planner.stockout)."""

    backoff: bool = False
    lemon: bool = False
    fault: Fault | None = None
    hand_back: bool = False
    after: str = ""


@dataclass(frozen=True)
class RemedyPayload:
    """The ladder's in-place rung a REBOOT or RESET_GPU carries out, the fault it answers,
    and repair: it starts a repair (counts toward the hourly limit)."""

    rung: Remedy
    fault: Fault | None = None
    repair: bool = False


@dataclass(frozen=True)
class DiagnosePayload:
    """The dcgmi diag a DIAGNOSE starts or collects: level (1-3) and why."""

    level: int
    why: DiagWhy


@dataclass(frozen=True)
class UncordonPayload:
    """replaces: the node a promoted warm spare serves in place of (None otherwise)."""

    replaces: str | None = None


@dataclass(frozen=True)
class ScalePayload:
    """The pool's new autoscaled desired count."""

    desired: int


@dataclass(frozen=True)
class TagsPayload:
    """The pool's labels an UPDATE_TAGS sets on the instance, as sorted (key, value)."""

    tags: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PeerPayload:
    """The known-good node of the pool an NCCL_PEER test pairs with."""

    peer: str


Payload = (
    ProvisionPayload
    | CordonPayload
    | TerminatePayload
    | RemedyPayload
    | DiagnosePayload
    | UncordonPayload
    | ScalePayload
    | TagsPayload
    | PeerPayload
)
