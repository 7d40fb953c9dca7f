"""Playbooks over SSH: cordon, drain, drain_check and uncordon on nodes and head nodes.

    load_playbook(scheduler, kind, override_path=None) -> Playbook | None
    SSHRunner(ssh, base_dir=...).run(playbook, targets, extra=...) -> tuple[PlaybookOutcome, ...]

See docs/playbooks.md for the file format and the SSH settings.
"""

from navarch.remote.playbook import (
    TEMPLATE_VARIABLES,
    Playbook,
    PlaybookKind,
    Step,
    StepHost,
    load_playbook,
    load_playbook_file,
)
from navarch.remote.runner import (
    PlaybookOutcome,
    PlaybookTarget,
    SSHRunner,
    SSHSettings,
    StepResult,
)

__all__ = [
    "TEMPLATE_VARIABLES",
    "Playbook",
    "PlaybookKind",
    "PlaybookOutcome",
    "PlaybookTarget",
    "SSHRunner",
    "SSHSettings",
    "Step",
    "StepHost",
    "StepResult",
    "load_playbook",
    "load_playbook_file",
]
