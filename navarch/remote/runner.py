"""Run playbooks over SSH with fabric (docs/design.md, Playbooks).

One SSHRunner per pool, built from the pool's `ssh` mapping (fleet.schema.json
$defs.ssh). `run` executes a playbook on many targets in parallel (at most ssh.parallel
at once); on one target the steps run in order and the first failed step (unless it has
ignore_errors) ends that target's playbook. Nothing is retried here: the executor runs
the playbook again on its next run.

Every failure becomes data, never an exception: a PlaybookOutcome with ok=False, the
error text of a navarch.errors.RemoteError, and a StepResult per step tried. A step that
could not reach its host (connection refused, DNS, authentication, an unknown or
mismatched host key) has exit_code None; a step that ran past its timeout also has
exit_code None. Only configuration mistakes (bad ssh mapping, a playbook that needs
ssh.head_node when none is set) raise ConfigError.

Host keys: strict by default (paramiko RejectPolicy): the host's key must be in
ssh.known_hosts (resolved against base_dir), else in ~/.ssh/known_hosts. With
strict_host_keys: false any key is accepted and nothing is written anywhere. ~/.ssh/config
is never read (fabric load_ssh_configs=False): fleet.yaml is the whole truth.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from navarch.errors import ConfigError, RemoteError
from navarch.fleet.durations import parse_duration_s
from navarch.remote.playbook import Playbook, Step, StepHost

#: Characters of combined stdout+stderr kept per step for the audit log.
OUTPUT_TAIL_CHARS = 2000
#: Characters of stdout kept whole per step for callers that parse it (dcgmi diag -j).
STDOUT_MAX_CHARS = 4 * 1024 * 1024

_SSH_DEFAULTS: dict[str, Any] = {
    "user": "root",
    "port": 22,
    "strict_host_keys": True,
    "connect_timeout": "10s",
    "parallel": 8,
}


@dataclass(frozen=True)
class PlaybookTarget:
    """One node to run a playbook for.

    address: how to reach the node over SSH (IP or DNS name); None means use `node`.
    reason: why (rendered into steps as `reason`, e.g. the Slurm drain Reason).
    """

    fleet: str
    pool: str
    node: str
    address: str | None
    reason: str


@dataclass(frozen=True)
class StepResult:
    """What one step did, for the audit log.

    host: where it ran (address or head node); command: the rendered command sent;
    exit_code: the remote exit status, None when the command never finished (no
    connection, host key refused, timed out); duration_s: seconds including connecting;
    output_tail: the last OUTPUT_TAIL_CHARS characters of stdout then stderr, or the
    connection error; ok: the step met its `expect`; stdout: the command's whole stdout
    (up to STDOUT_MAX_CHARS, "" when it never ran), for callers that parse it.
    """

    host: str
    command: str
    exit_code: int | None
    duration_s: float
    output_tail: str
    ok: bool
    stdout: str = field(default="", repr=False)


@dataclass(frozen=True)
class PlaybookOutcome:
    """The result of one playbook on one node.

    ok: every step without ignore_errors succeeded; steps: results in order, up to and
    including the step that failed; error: one line naming host, command, exit code and
    what to do (the text of a RemoteError), None when ok.
    """

    node: str
    playbook: str
    ok: bool
    steps: tuple[StepResult, ...]
    error: str | None


@dataclass(frozen=True)
class SSHSettings:
    """A pool's `ssh` mapping with defaults applied and paths resolved (seconds in _s)."""

    user: str
    port: int
    key_file: Path | None
    jump_host: str | None
    head_node: str | None
    known_hosts: Path | None
    strict_host_keys: bool
    connect_timeout_s: int
    parallel: int

    @classmethod
    def from_mapping(
        cls, ssh: Mapping[str, Any], *, base_dir: Path, pool: str = "<pool>"
    ) -> SSHSettings:
        """Build settings from fleet.yaml pools.<pool>.ssh; relative paths are under base_dir.

        Raises ConfigError (key path pools.<pool>.ssh.<key>, with the pool's name) for a
        bad duration, a key_file or known_hosts that does not exist.
        """
        raw = {**_SSH_DEFAULTS, **ssh}

        def path(key: str) -> Path | None:
            if not raw.get(key):
                return None
            p = Path(raw[key]).expanduser()
            p = p if p.is_absolute() else base_dir / p
            if not p.is_file():
                raise ConfigError(
                    f"file not found: {p}",
                    key_path=f"pools.{pool}.ssh.{key}",
                    hint="give a path relative to fleet.yaml, or an absolute one",
                )
            return p

        try:
            connect_timeout_s = parse_duration_s(raw["connect_timeout"])
        except ValueError as exc:
            raise ConfigError(
                str(exc), key_path=f"pools.{pool}.ssh.connect_timeout", hint="write e.g. 10s"
            ) from exc
        return cls(
            user=str(raw["user"]),
            port=int(raw["port"]),
            key_file=path("key_file"),
            jump_host=raw.get("jump_host") or None,
            head_node=raw.get("head_node") or None,
            known_hosts=path("known_hosts"),
            strict_host_keys=bool(raw["strict_host_keys"]),
            connect_timeout_s=max(1, connect_timeout_s),
            parallel=max(1, int(raw["parallel"])),
        )


class _HostKeyUnknown(paramiko.SSHException):  # type: ignore[misc]  # paramiko is untyped
    """Raised by the strict policy for a host whose key is not in known_hosts."""

    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        self.hostname = hostname
        self.key_type = key.get_name()
        self.fingerprint = key.fingerprint
        super().__init__(f"host key of {hostname} not in known_hosts")


class _HandshakeTimeout(paramiko.SSHException):  # type: ignore[misc]
    """The SSH handshake (banner, key exchange) did not finish within connect_timeout."""


class _RejectUnknown(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """paramiko RejectPolicy that keeps the offered key for the error message."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise _HostKeyUnknown(hostname, key)


class SSHRunner:
    """Runs playbooks over SSH for one pool (fabric Connection per host and target)."""

    def __init__(self, ssh: Mapping[str, Any], *, base_dir: Path, pool: str = "<pool>") -> None:
        """ssh: the pool's `ssh` mapping (fleet.schema.json $defs.ssh); base_dir: the
        directory of fleet.yaml, against which key_file and known_hosts are resolved;
        pool: the pool's name, for the key paths errors name.

        Raises ConfigError for a bad mapping (see SSHSettings.from_mapping).
        """
        self.pool = pool
        self.settings = SSHSettings.from_mapping(ssh, base_dir=base_dir, pool=pool)
        self._config = Config(lazy=True, overrides={"load_ssh_configs": False})

    def run(
        self,
        playbook: Playbook,
        targets: Sequence[PlaybookTarget],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[PlaybookOutcome, ...]:
        """Run `playbook` for every target, at most ssh.parallel targets at once.

        extra: more template values, e.g. {"drain_timeout_s": 600} for drain. Returns one
        PlaybookOutcome per target, in the order of `targets`; failures are outcomes, not
        exceptions. Raises ConfigError only when a step needs the head node and
        ssh.head_node is not set. Sources: fabric Connection.run, paramiko SSHClient.
        """
        if playbook.uses_head and not self.settings.head_node:
            raise ConfigError(
                f"playbook {playbook.kind.value} ({playbook.source}) runs steps on the "
                "scheduler head node, but ssh.head_node is not set",
                key_path=f"pools.{self.pool}.ssh.head_node",
                hint="set it to the slurm controller or the host with kubectl",
            )
        if not targets:
            return ()
        context_extra = dict(extra or {})
        workers = min(self.settings.parallel, len(targets))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="navarch-ssh") as pool:
            return tuple(pool.map(lambda t: self._run_target(playbook, t, context_extra), targets))

    def _run_target(
        self, playbook: Playbook, target: PlaybookTarget, extra: Mapping[str, Any]
    ) -> PlaybookOutcome:
        address = target.address or target.node
        context = {
            **extra,
            "node": target.node,
            "pool": target.pool,
            "fleet": target.fleet,
            "reason": target.reason,
            "address": address,
        }
        connections: dict[str, Connection] = {}
        results: list[StepResult] = []
        error: str | None = None
        try:
            for step in playbook.steps:
                host = address if step.host is StepHost.NODE else str(self.settings.head_node)
                result, failure = self._run_step(step, host, context, connections)
                results.append(result)
                if failure is not None and not step.ignore_errors:
                    error = failure
                    break
        finally:
            for conn in connections.values():
                _close(conn)
        return PlaybookOutcome(
            node=target.node,
            playbook=playbook.kind.value,
            ok=error is None,
            steps=tuple(results),
            error=error,
        )

    def _run_step(
        self,
        step: Step,
        host: str,
        context: Mapping[str, Any],
        connections: dict[str, Connection],
    ) -> tuple[StepResult, str | None]:
        started = time.monotonic()
        try:
            command = step.render(context)
        except jinja2.TemplateError as exc:
            tail = f"template error in {step.key_path}: {exc}"
            return (
                StepResult(host, step.run, None, 0.0, tail, False),
                str(RemoteError(host, step.run, None, tail)),
            )
        exit_code: int | None = None
        stdout = ""
        try:
            conn = connections.get(host)
            if conn is None:
                conn = connections[host] = self._connect(host)
            res = conn.run(command, hide=True, warn=True, in_stream=False, timeout=step.timeout_s)
            if res.exited == -1 and step.timeout_s and _since(started) >= step.timeout_s:
                # invoke's timer closed the channel before it could raise CommandTimedOut:
                # paramiko then reports exit status -1 ("none received"). Same outcome.
                return self._timed_out(host, command, step, res.stdout + res.stderr, started)
            exit_code, stdout = res.exited, res.stdout
            tail = (res.stdout + res.stderr)[-OUTPUT_TAIL_CHARS:]
        except CommandTimedOut as exc:
            return self._timed_out(
                host, command, step, exc.result.stdout + exc.result.stderr, started
            )
        except Exception as exc:  # noqa: BLE001 - one boundary: every SSH failure becomes data
            detail = self._describe_connect_error(host, exc)
            result = StepResult(host, command, None, _since(started), detail, False)
            # Not str(RemoteError): it keeps only the last 200 characters, and here the
            # whole message (which host, what to do) matters.
            return result, f"{host}: {command!r} failed (no connection): {detail}"
        ok = step.succeeded(exit_code, stdout)
        result = StepResult(
            host, command, exit_code, _since(started), tail, ok, stdout[:STDOUT_MAX_CHARS]
        )
        if ok:
            return result, None
        if exit_code in step.exit_codes and step.output_matches is not None:
            last = stdout.strip().splitlines()[-1:] or ["<no output>"]
            return result, (
                f"{host}: {command!r} exited {exit_code} but its output does not match "
                f"{step.output_matches!r} ({step.key_path}.expect); last line: {last[0][:200]}"
            )
        return result, str(RemoteError(host, command, exit_code, tail))

    @staticmethod
    def _timed_out(
        host: str, command: str, step: Step, partial: str, started: float
    ) -> tuple[StepResult, str]:
        tail = (partial + f"\n[navarch: timed out after {step.timeout_s:g}s]")[-OUTPUT_TAIL_CHARS:]
        result = StepResult(host, command, None, _since(started), tail, False)
        return result, (
            f"{host}: {command!r} timed out after {step.timeout_s:g}s "
            f"({step.key_path}.timeout); the remote command may still be running"
        )

    def _connect(self, host: str) -> Connection:
        gateway = None
        if self.settings.jump_host:
            gateway = self._connection(self.settings.jump_host, shorthand=True)
        conn = self._connection(host, gateway=gateway)
        try:
            conn.open()
        except paramiko.SSHException as exc:
            # When the handshake outlives connect_timeout, paramiko goes on to authenticate
            # and says "No existing session"; the transport kept the real cause.
            transport = conn.client.get_transport()
            cause = transport.get_exception() if transport is not None else None
            _close(conn)
            if isinstance(cause, Exception) and cause is not exc:
                raise cause from exc
            if str(exc) == "No existing session":
                raise _HandshakeTimeout(str(exc)) from exc
            raise
        except BaseException:
            _close(conn)
            raise
        return conn

    def _connection(
        self, host: str, *, gateway: Connection | None = None, shorthand: bool = False
    ) -> Connection:
        s = self.settings
        # A jump_host may be written user@host:port; fabric refuses a user or port given
        # both in the string and as an argument.
        user: str | None = s.user
        port: int | None = s.port
        if shorthand:
            user = None if "@" in host else s.user
            port = None if ":" in host.rpartition("@")[2] else s.port
        connect_kwargs: dict[str, Any] = {
            "look_for_keys": False,
            "allow_agent": s.key_file is None,
            "banner_timeout": s.connect_timeout_s,
            "auth_timeout": s.connect_timeout_s,
        }
        if s.key_file is not None:
            connect_kwargs["key_filename"] = str(s.key_file)
        conn = Connection(
            host,
            user=user,
            port=port,
            config=self._config,
            gateway=gateway,
            connect_timeout=s.connect_timeout_s,
            connect_kwargs=connect_kwargs,
        )
        if s.strict_host_keys:
            conn.client.set_missing_host_key_policy(_RejectUnknown())
            # HostKeys.load reads without remembering the file, so nothing is ever written.
            if s.known_hosts is not None:
                conn.client.get_host_keys().load(str(s.known_hosts))
            else:
                default = Path("~/.ssh/known_hosts").expanduser()
                if default.is_file():
                    conn.client.get_host_keys().load(str(default))
        else:
            conn.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        return conn

    def _describe_connect_error(self, host: str, exc: BaseException) -> str:
        s = self.settings
        where = f"{s.user}@{host}:{s.port}"
        kh = str(s.known_hosts) if s.known_hosts else "~/.ssh/known_hosts"
        if isinstance(exc, paramiko.BadHostKeyException):
            return (
                f"host key mismatch for {exc.hostname}: it offered {exc.key.get_name()} "
                f"{exc.key.fingerprint}, {kh} expects {exc.expected_key.fingerprint}. "
                "Either the host was rebuilt or someone is in the middle: verify the new key "
                f"out of band, then replace its line in {kh} (ssh-keygen -R, ssh-keyscan)"
            )
        if isinstance(exc, _HostKeyUnknown):
            return (
                f"unknown host key for {exc.hostname} ({exc.key_type} {exc.fingerprint}) under "
                f"strict_host_keys: add the host's key to {kh} (ssh-keyscan, verified out of "
                "band), or set ssh.strict_host_keys: false on a trusted network"
            )
        if isinstance(exc, paramiko.AuthenticationException):
            return f"authentication failed for {where}: {exc}; check ssh.user and ssh.key_file"
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            return f"cannot connect to {where}: {exc.strerror or exc}"
        if isinstance(exc, TimeoutError):
            return f"cannot connect to {where}: timed out after {s.connect_timeout_s}s"
        if isinstance(exc, _HandshakeTimeout) or (
            isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower()
        ):
            return (
                f"cannot connect to {where}: no SSH handshake within {s.connect_timeout_s}s "
                "(is it an SSH server, and is ssh.port right?)"
            )
        if isinstance(exc, OSError):
            return f"cannot connect to {where}: {exc.strerror or exc}"
        return f"ssh to {where} failed: {type(exc).__name__}: {exc}"


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _close(conn: Connection) -> None:
    gateway = conn.gateway
    conn.close()
    if isinstance(gateway, Connection):
        gateway.close()
