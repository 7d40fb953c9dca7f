"""Playbooks over SSH: cordon, drain, drain_check and uncordon on nodes and head nodes.

    navarch.remote.playbook.load_playbook(scheduler, kind, override_path=None) -> Playbook | None
    navarch.remote.runner.SSHRunner(ssh, base_dir=...).run(playbook, targets, extra=...)
        -> tuple[PlaybookOutcome, ...]

The package re-exports nothing, so importing the playbook format (navarch.remote.playbook,
which fleet.yaml validation needs) does not import fabric and paramiko.

See docs/playbooks.md for the file format and the SSH settings.
"""
