"""Who acted: the person, CI job, MCP client or schedule behind a run or an operator verb.

Every audit record carries its run's Actor (field `by`), and `navarch history` shows it.
The identity is read from the process environment in one place only, the CLI's front door
(navarch.cli), through actor_from_env below, and handed down as a parameter; the planner
and the reconcile internals never look at the environment for it. The MCP server names
its client (the clientInfo it sent at initialize) with Actor.mcp.

How a run is recognised (the first rule that matches wins):
1. GitHub Actions (GITHUB_ACTIONS=true): the job is GITHUB_RUN_ID of GITHUB_REPOSITORY,
   the person behind it GITHUB_ACTOR ("Store information in variables", GitHub docs).
2. GitLab CI (GITLAB_CI=true): the job is CI_JOB_ID, the person GITLAB_USER_LOGIN
   ("Predefined CI/CD variables", GitLab docs).
3. Any other CI that sets CI (Jenkins, CircleCI, Buildkite, Travis, ...): a CI job run
   by the login on that host.
4. NAVARCH_SCHEDULED set (the shipped systemd unit, cron example and Kubernetes CronJob
   set it): a scheduled run. It is never guessed from a missing terminal: a person's
   `apply` piped into a file or run over ssh is still a person's.
5. Otherwise: a person, login@host.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from navarch.textsafe import node_text

#: Environment variable the shipped schedulers (systemd timer, cron, CronJob) set.
SCHEDULED_ENV = "NAVARCH_SCHEDULED"

#: Longest name, host or job kept: every field comes from an environment variable or an
#: MCP client's own announcement, so each is made plain and capped where it enters.
MAX_FIELD_CHARS = 128


class ActorKind(enum.StrEnum):
    """What kind of actor ran a command (serialised by value)."""

    PERSON = "person"  # someone at a shell: name is the login, host the machine
    CI = "ci"  # a CI job: job names it, name the person who triggered it (if known)
    MCP = "mcp"  # an MCP client's tool call: name is the client's name
    SCHEDULED = "scheduled"  # cron, a systemd timer, a CronJob (NAVARCH_SCHEDULED)


def _field(value: str | None) -> str:
    return node_text(value or "", MAX_FIELD_CHARS)


@dataclass(frozen=True)
class Actor:
    """Who acted. kind: ActorKind; name: login, CI user or MCP client name ("" when not
    known); host: the machine (person, scheduled, generic CI); job: the CI job ("GitHub
    Actions run 123 of org/repo"). Fields are plain text capped at MAX_FIELD_CHARS."""

    kind: ActorKind
    name: str = ""
    host: str = ""
    job: str = ""

    def __post_init__(self) -> None:
        for attr in ("name", "host", "job"):
            object.__setattr__(self, attr, _field(getattr(self, attr)))

    @classmethod
    def mcp(cls, client: str) -> Actor:
        """An MCP client's tool call, named by the clientInfo it sent at initialize."""
        return cls(ActorKind.MCP, name=client or "unnamed-mcp-client")

    def label(self) -> str:
        """One line for people: "alice@gpu-admin", "CI GitHub Actions run 7 of o/r (alice)",
        "MCP client claude-code", "scheduled run on cron-host"."""
        at = f"{self.name or 'unknown'}@{self.host}" if self.host else self.name or "unknown"
        if self.kind is ActorKind.CI:
            by = f" ({at})" if self.name or self.host else ""
            return f"CI {self.job or 'job'}{by}"
        if self.kind is ActorKind.MCP:
            return f"MCP client {self.name or '(unnamed)'}"
        if self.kind is ActorKind.SCHEDULED:
            return f"scheduled run on {self.host}" if self.host else "scheduled run"
        return at

    def to_json(self) -> dict[str, str]:
        """The audit record's `by` field: {"kind", "name", "host", "job"}."""
        return {"kind": self.kind.value, "name": self.name, "host": self.host, "job": self.job}

    @classmethod
    def from_json(cls, value: Any) -> Actor | None:
        """An audit record's `by` field -> Actor; None when absent or not readable (a
        record written before the field, or damaged)."""
        if not isinstance(value, Mapping):
            return None
        try:
            kind = ActorKind(str(value.get("kind")))
        except ValueError:
            return None
        return cls(
            kind,
            name=str(value.get("name") or ""),
            host=str(value.get("host") or ""),
            job=str(value.get("job") or ""),
        )


def _set(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no")


def actor_from_env(env: Mapping[str, str], *, user: str, host: str) -> Actor:
    """The actor of a CLI run from its environment (the rules in the module docstring).

    env: the process environment; user: the login (getpass.getuser()); host: the machine
    (socket.gethostname()). Pure: the CLI reads the process and passes what it read.
    """
    if env.get("GITHUB_ACTIONS") == "true":
        repo = env.get("GITHUB_REPOSITORY", "")
        job = f"GitHub Actions run {env.get('GITHUB_RUN_ID') or '?'}" + (
            f" of {repo}" if repo else ""
        )
        return Actor(ActorKind.CI, name=env.get("GITHUB_ACTOR", ""), job=job)
    if env.get("GITLAB_CI") == "true":
        project = env.get("CI_PROJECT_PATH", "")
        job = f"GitLab CI job {env.get('CI_JOB_ID') or '?'}" + (f" of {project}" if project else "")
        return Actor(ActorKind.CI, name=env.get("GITLAB_USER_LOGIN", ""), job=job)
    if _set(env, "CI"):
        return Actor(ActorKind.CI, name=user, host=host, job="CI job")
    if _set(env, SCHEDULED_ENV):
        return Actor(ActorKind.SCHEDULED, name=user, host=host)
    return Actor(ActorKind.PERSON, name=user, host=host)
