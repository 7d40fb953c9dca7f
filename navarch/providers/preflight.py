"""Preflight: what a pool's launches need, checked before the first one, as plain data.

Providers declaring Capability.PREFLIGHT compute Findings by reads (the I/O: EC2
DescribeImages, DescribeInstanceTypeOfferings, ...; navarch.providers.aws_preflight,
gcp_preflight, azure_preflight); this module holds the types, the recorder of one
provider's reads (Reads), and judges and renders them without I/O, so `plan` lists every gap
at once, each with its fix, instead of `apply` revealing one missing piece per run.

Verdicts: GAP (a launch would fail: the run stops before any launch), SKIPPED (the
credentials' policy does not allow the read: the finding names the action to grant; not
fatal), WARNING (the read failed or a limit could not be read: not fatal; docs/design.md,
Safety rules: an optional cloud feature that fails degrades with a warning).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from navarch.providers.optional import answer_excerpt
from navarch.textsafe import counted

__all__ = [
    "Check",
    "Finding",
    "LaunchNeeds",
    "Preflight",
    "Preflighter",
    "Reads",
    "ReadFailure",
    "Verdict",
    "NotFoundAnswer",
    "judge_quota",
]


class Check(enum.StrEnum):
    """What one finding is about, in the order `plan` lists them."""

    STORE = "store"
    ACCOUNT = "account"
    ZONE = "zone"
    IMAGE = "image"
    INSTANCE_PROFILE = "instance_profile"
    SUBNET = "subnet"
    SECURITY_GROUP = "security_group"
    KEY_PAIR = "key_pair"
    OFFERING = "offering"
    QUOTA = "quota"


class Verdict(enum.StrEnum):
    """GAP stops the run before any launch; SKIPPED and WARNING are said and pass."""

    GAP = "gap"
    SKIPPED = "skipped"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One preflight result that needs a person's eye.

    check: what was checked; verdict: see Verdict; where: the provider or store it was
    read from ("ec2", "store"); subject: the thing checked ("pool train: instance profile
    navarch-node"); detail: what is wrong; fix: what to do, in one sentence; key_path:
    the fleet.yaml key to change, "" when the fix is in the cloud; permission: the IAM
    action or role permission a SKIPPED check needs.
    """

    check: Check
    verdict: Verdict
    where: str
    subject: str
    detail: str
    fix: str
    key_path: str = ""
    permission: str = ""

    def line(self) -> str:
        """The finding on one line: "<subject>: <detail> -> <fix> (<key path>)"."""
        key = f" ({self.key_path})" if self.key_path else ""
        return f"{self.subject}: {self.detail} -> {self.fix}{key}"

    def to_json(self) -> dict[str, Any]:
        """The finding as plan JSON's preflight entry: every field, enums as their values."""
        return {
            "check": self.check.value,
            "verdict": self.verdict.value,
            "where": self.where,
            "subject": self.subject,
            "detail": self.detail,
            "fix": self.fix,
            "key_path": self.key_path,
            "permission": self.permission,
        }


@dataclass(frozen=True)
class LaunchNeeds:
    """What one pool's launches on one provider need: the provider's input to preflight.

    pool: the pool's name; zones, instance_types: the placement's, in fallback order;
    spot: some launch asks for spot capacity; max_nodes: the pool's max (for a quota's
    need); gpus_per_node: GPUs per node; options: the placement's provider section of
    fleet.yaml (aws:, gcp:, ...); key_prefix: the key path of that placement
    ("pools.train" or "pools.train.placements[1]").
    """

    pool: str
    zones: tuple[str, ...]
    instance_types: tuple[str, ...]
    spot: bool
    max_nodes: int
    gpus_per_node: int
    options: Mapping[str, Any] = field(default_factory=dict)
    key_prefix: str = ""


@runtime_checkable
class Preflighter(Protocol):
    """A provider that checks what launches need (Capability.PREFLIGHT).

    preflight(needs) -> every finding (gaps, skipped checks, warnings) for these pools,
    checked by reads only; a passed check yields nothing. Never raises for a denied or
    failed read: that is a SKIPPED or WARNING finding."""

    def preflight(self, needs: Sequence[LaunchNeeds]) -> Sequence[Finding]: ...


@dataclass(frozen=True)
class Preflight:
    """Every finding of one preflight, sorted (check, where, subject); blocks: any GAP."""

    findings: tuple[Finding, ...] = ()

    @classmethod
    def of(cls, findings: Sequence[Finding]) -> Preflight:
        """The findings without repeats, sorted by check (Check's order), provider, subject."""
        order = list(Check)
        unique = dict.fromkeys(findings)
        return cls(tuple(sorted(unique, key=lambda f: (order.index(f.check), f.where, f.subject))))

    @property
    def gaps(self) -> tuple[Finding, ...]:
        """The GAP findings: what would make a launch fail."""
        return tuple(f for f in self.findings if f.verdict is Verdict.GAP)

    @property
    def blocks(self) -> bool:
        """True when a launch would fail: the run stops before any launch."""
        return bool(self.gaps)

    def text(self) -> str:
        """The findings for people: gaps first with their fixes, then skipped checks and
        warnings; "" when there is nothing to say. Ends with a newline when not empty."""
        if not self.findings:
            return ""
        out: list[str] = []
        if self.gaps:
            out.append(
                f"Preflight: {counted(len(self.gaps), 'gap')} before the first launch "
                "(apply stops before launching anything until they are fixed):"
            )
            out += [f"  ! {f.line()}" for f in self.gaps]
        rest = [f for f in self.findings if f.verdict is not Verdict.GAP]
        if rest:
            out.append("Preflight notes (not fatal):")
            for f in rest:
                need = f" (needs {f.permission})" if f.permission else ""
                out.append(f"  ? {f.subject}: {f.detail}{need} -> {f.fix}")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        """{"blocks": bool, "findings": [Finding.to_json(), ...]}: plan JSON's preflight."""
        return {"blocks": self.blocks, "findings": [f.to_json() for f in self.findings]}


class ReadFailure(enum.Enum):
    """How a preflight read failed, as a provider's classify(exc) tells it."""

    DENIED = "denied"
    NOT_FOUND = "not_found"
    FAILED = "failed"


class NotFoundAnswer(Exception):
    """A read answered that the thing it names does not exist; raised out of Reads.read
    to the check, which knows what a missing thing means there."""


@dataclass
class Reads:
    """The findings of one provider's preflight, and the reads that make them.

    where: the provider's name; classify(exc) -> how a read failed (ReadFailure), or None
    for an exception that is not the cloud's answer (it propagates unchanged)."""

    where: str
    classify: Callable[[Exception], ReadFailure | None]
    findings: list[Finding] = field(default_factory=list)

    @contextmanager
    def read(self, permission: str, subject: str, check: Check) -> Iterator[None]:
        """Around one read: a NOT_FOUND answer raises NotFoundAnswer to the caller; a
        denied read is a SKIPPED finding naming the permission, any other failure a
        WARNING; both end the block (an optional check never stops the run)."""
        try:
            yield
        except Exception as exc:
            failure = self.classify(exc)
            if failure is None:
                raise
            if failure is ReadFailure.NOT_FOUND:
                raise NotFoundAnswer(str(exc)) from exc
            if failure is ReadFailure.DENIED:
                detail, fix = "not checked: the policy denies it", f"grant {permission} to check it"
            else:
                detail = f"not checked: {answer_excerpt(exc, 200)}"
                fix = "it is checked again next run"
            self.add(check, _VERDICT[failure], subject, detail, fix, permission=permission)

    def add(
        self,
        check: Check,
        verdict: Verdict,
        subject: str,
        detail: str,
        fix: str,
        *,
        key_path: str = "",
        permission: str = "",
    ) -> None:
        """Record one finding of this provider (where); key_path: the fleet.yaml key it is
        about, permission: the action a skipped check needs."""
        self.findings.append(
            Finding(check, verdict, self.where, subject, detail, fix, key_path, permission)
        )


_VERDICT = {ReadFailure.DENIED: Verdict.SKIPPED, ReadFailure.FAILED: Verdict.WARNING}


def judge_quota(
    reads: Reads,
    subject: str,
    unit: str,
    limit: float,
    used: float,
    per_node: int,
    max_nodes: int,
    ask: str,
) -> None:
    """A quota against one node and the pool's max (pure): a limit below one node is a
    GAP (no launch can succeed); room for less than one node now (limit - used), or a
    limit below the pool's max, is a WARNING (nodes may go, the pool may never fill).
    unit: what is counted ("vCPUs", "GPUs"); ask: how to raise the limit."""
    if limit < per_node:
        reads.add(
            Check.QUOTA,
            Verdict.GAP,
            subject,
            f"{limit:g} {unit} allowed, one node needs {per_node}",
            ask,
        )
    elif limit - used < per_node:
        reads.add(
            Check.QUOTA,
            Verdict.WARNING,
            subject,
            f"{limit - used:g} of {limit:g} {unit} free, one node needs {per_node}",
            ask,
        )
    elif limit < per_node * max_nodes:
        reads.add(
            Check.QUOTA,
            Verdict.WARNING,
            subject,
            f"{limit:g} {unit} allowed, the pool's max needs {per_node * max_nodes}",
            ask,
        )
