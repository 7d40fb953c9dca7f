"""One log-line rule: the shape of every matcher table of the agent, the kernel log's host
signals (navarch.agent.host_signals), its mlx5 lines (navarch.agent.network) and the fabric
manager's log (navarch.agent.fabric). Each table keeps its own way of matching (anchored
at the message's start, or anywhere in the line); the rule says what a match means.

Python 3.9-compatible like the rest of the agent (it ships to GPU nodes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from navarch.report.health import Remedy, Status

__all__ = ["LogRule", "first_found"]


@dataclass(frozen=True)
class LogRule:
    """One log-line matcher.

    kind: the fault kind ``<class>:<name>``; pattern: the line's regex; source: the file
    (kernel, driver, tool) whose format string it follows, or where its sample lines come
    from; meaning: a few words for the finding; status and action: the check's when the
    rule fires (action is the recommended remedy; the remediation table's row decides);
    latched: fatal at once, held for the boot; threshold events within window_s fire a
    counted rule (host signals count; the other tables fire on one line).
    """

    kind: str
    pattern: re.Pattern[str]
    source: str
    meaning: str
    status: Status
    action: Remedy
    latched: bool = False
    threshold: int = 1
    window_s: float = 3600.0

    @property
    def signal_class(self) -> str:
        """The fault class the kind's prefix names (``host_cpu`` for ``host_cpu:...``)."""
        return self.kind.split(":", 1)[0]


def first_found(rules: Iterable[LogRule], text: str) -> LogRule | None:
    """The first of rules whose pattern occurs anywhere in text (re.search), or None."""
    for rule in rules:
        if rule.pattern.search(text):
            return rule
    return None
