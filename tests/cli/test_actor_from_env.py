"""How the CLI names who runs it (navarch.actor.actor_from_env): CI variables first, then
the shipped schedulers' NAVARCH_SCHEDULED, else the person at login@host."""

from __future__ import annotations

import pytest

from navarch.actor import Actor, ActorKind, actor_from_env

WHO = {"user": "alice", "host": "admin-1"}


@pytest.mark.parametrize(
    ("env", "label"),
    [
        ({}, "alice@admin-1"),
        ({"CI": "false", "NAVARCH_SCHEDULED": "0"}, "alice@admin-1"),
        ({"NAVARCH_SCHEDULED": "1"}, "scheduled run on admin-1"),
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "octocat", "GITHUB_RUN_ID": "7", "CI": "1"},
            "CI GitHub Actions run 7 (octocat)",
        ),
        (
            {"GITLAB_CI": "true", "CI_JOB_ID": "99", "GITLAB_USER_LOGIN": "bob", "CI": "true"},
            "CI GitLab CI job 99 (bob)",
        ),
        ({"CI": "true"}, "CI CI job (alice@admin-1)"),
        # A scheduled GitHub workflow is a CI job: its run id says more than "scheduled".
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "8", "NAVARCH_SCHEDULED": "1"},
            "CI GitHub Actions run 8",
        ),
    ],
)
def test_the_environment_names_who_runs(env: dict[str, str], label: str) -> None:
    assert actor_from_env(env, **WHO).label() == label


def test_names_from_the_environment_or_a_client_are_plain_and_capped() -> None:
    actor = actor_from_env(
        {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "evil\x1b[31m\nFAKE LINE" + "x" * 500},
        **WHO,
    )
    assert "\x1b" not in actor.name and "\n" not in actor.name and len(actor.name) <= 128
    mcp = Actor.mcp("claude\u200b\U000e0041")
    assert mcp.kind is ActorKind.MCP and mcp.label().startswith("MCP client claude")
    assert Actor.from_json(mcp.to_json()) == mcp
    assert Actor.from_json({"kind": "robot"}) is None and Actor.from_json(None) is None
