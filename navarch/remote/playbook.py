"""Playbook files: loading, validation and rendering of step commands.

A playbook file (schemas/playbook.schema.json) holds the named playbooks of one workload
scheduler: cordon, drain, drain_check and uncordon. Each playbook is an ordered tuple of
steps; a step is one shell command, a jinja2 template rendered with StrictUndefined in
which every substituted value is passed through shlex.quote, so a value reaches the remote
shell as exactly one literal word whatever quotes, `;`, `$(...)` or newlines it holds.

The built-in files live in playbooks/<scheduler>.yaml; scheduler `none` has no file and so
no remote steps. A pool may name its own file per kind (fleet.yaml pools.<pool>.playbooks).
"""

from __future__ import annotations

import enum
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jsonschema
import yaml

from navarch.errors import ConfigError
from navarch.fleet.durations import parse_duration_s
from navarch.fleet.schemas import describe
from navarch.resources import data_dir, schema_path
from navarch.templating import environment

#: The variables a step template may use. drain_timeout_s (drain), level, token and tests
#: (diagnostics: the dcgmi diag level, the diagnostic's name, the acceptance tests to run
#: instead, comma-separated or "") come from the caller's `extra`.
TEMPLATE_VARIABLES = frozenset(
    {"node", "pool", "fleet", "reason", "address", "drain_timeout_s", "level", "token", "tests"}
)

DEFAULT_STEP_TIMEOUT = "60s"


class PlaybookKind(enum.StrEnum):
    """The playbooks navarch runs, in lifecycle order (docs/design.md, Node lifecycle)."""

    CORDON = "cordon"
    DRAIN = "drain"
    DRAIN_CHECK = "drain_check"
    UNCORDON = "uncordon"
    DIAGNOSTICS = "diagnostics"  # active GPU diagnostics on the node, any scheduler
    RESET_GPU = "reset_gpu"  # the ladder's GPU reset, nvidia-smi -r on the node


#: The kinds that run on the node itself, one built-in file each (playbooks/<kind>.yaml).
NODE_KINDS = frozenset({PlaybookKind.DIAGNOSTICS, PlaybookKind.RESET_GPU})

#: The kinds a scheduler's playbook file provides (playbooks/<scheduler>.yaml).
SCHEDULER_KINDS = (
    PlaybookKind.CORDON,
    PlaybookKind.DRAIN,
    PlaybookKind.DRAIN_CHECK,
    PlaybookKind.UNCORDON,
)


class StepHost(enum.StrEnum):
    """Where a step runs: on the node itself, or on the pool's scheduler head node."""

    NODE = "node"
    HEAD = "head"


def _quote(value: Any) -> str:
    # jinja2 `finalize`: every {{ expression }} result becomes one shell word.
    return shlex.quote(str(value))


_ENV = environment(from_templates=False, finalize=_quote)


@dataclass(frozen=True)
class Step:
    """One step of a playbook.

    run: the jinja2 source of the command; timeout_s: seconds before the step fails;
    exit_codes: exit statuses that count as success; output_matches: a regular expression
    that must be found in stdout (re.MULTILINE), or None; key_path: where the step is in
    its file ("playbooks.cordon.steps[0]"), for messages.
    """

    run: str
    host: StepHost = StepHost.NODE
    sudo: bool = False
    timeout_s: float = 60.0
    exit_codes: tuple[int, ...] = (0,)
    output_matches: str | None = None
    ignore_errors: bool = False
    name: str = ""
    key_path: str = ""
    _template: jinja2.Template | None = field(default=None, compare=False, repr=False)

    def render(self, context: Mapping[str, Any]) -> str:
        """The shell command for `context` (TEMPLATE_VARIABLES -> values), every value quoted.

        With sudo, the command is wrapped as `sudo -n -- sh -c '<command>'` (sudo(8): -n
        never prompts, so a missing NOPASSWD rule fails fast instead of hanging).
        Raises jinja2.UndefinedError when a variable the template uses is missing.
        """
        template = self._template or _ENV.from_string(self.run)
        command = template.render(**context).strip()
        if self.sudo:
            command = f"sudo -n -- sh -c {shlex.quote(command)}"
        return command

    def succeeded(self, exit_code: int | None, stdout: str) -> bool:
        """Whether an exit status and stdout meet this step's `expect`."""
        if exit_code is None or exit_code not in self.exit_codes:
            return False
        if self.output_matches is not None:
            return re.search(self.output_matches, stdout, re.MULTILINE) is not None
        return True


@dataclass(frozen=True)
class Playbook:
    """A named, ordered list of steps loaded from one file.

    kind: the PlaybookKind; scheduler: the file's `scheduler` (None when it names none);
    source: the file it came from.
    """

    kind: PlaybookKind
    scheduler: str | None
    source: str
    steps: tuple[Step, ...]

    @property
    def uses_head(self) -> bool:
        """True when a step runs on the scheduler head node (ssh.head_node is then required)."""
        return any(step.host is StepHost.HEAD for step in self.steps)


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(schema_path("playbook.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _key_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(text: str, parts: list[Any]) -> int | None:
    """1-based line of the YAML node at `parts`, or of its nearest existing parent."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in parts:
        if node is None:
            break
        line = node.start_mark.line + 1
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    line, nxt = key.start_mark.line + 1, value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part < len(node.value):
                nxt = node.value[part]
                line = nxt.start_mark.line + 1
        node = nxt
    return line


#: A quoted fragment of a parser's message ('x', "x"), but not a token name ('<scalar>').
_QUOTED = re.compile(r"'(?!<)[^']*'|\"(?!<)[^\"]*\"")


def _unquoted(problem: object) -> str:
    """A YAML or jinja2 parser's message without the bits of the file it quotes: a file
    named as a playbook by mistake must not come back in the error."""
    return _QUOTED.sub("(text)", str(problem))


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read playbook file: {exc.strerror}",
            file=str(path),
            hint="check the path in pools.<pool>.playbooks (relative to fleet.yaml)",
        ) from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            f"not valid YAML: {_unquoted(getattr(exc, 'problem', exc))}",
            file=str(path),
            line=mark.line + 1 if mark else None,
            hint="fix the YAML syntax",
        ) from exc
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        parts = list(err.absolute_path)
        raise ConfigError(
            describe(err),
            file=str(path),
            line=_line_of(text, parts),
            key_path=_key_path(parts) or None,
            hint="see schemas/playbook.schema.json and docs/playbooks.md",
        )
    return text, doc


def _build_step(raw: Mapping[str, Any], *, path: Path, text: str, parts: list[Any]) -> Step:
    key_path, line = _key_path(parts), _line_of(text, parts)
    source = raw["run"]
    try:
        template = _ENV.from_string(source)
        unknown = jinja2.meta.find_undeclared_variables(_ENV.parse(source)) - TEMPLATE_VARIABLES
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(
            f"run: bad template: {_unquoted(exc.message)}",
            file=str(path),
            key_path=key_path,
            line=line,
            hint="fix the jinja2 syntax",
        ) from exc
    if unknown:
        raise ConfigError(
            f"run: unknown template variable(s) {', '.join(sorted(unknown))}",
            file=str(path),
            key_path=key_path,
            line=line,
            hint=f"use only {', '.join(sorted(TEMPLATE_VARIABLES))}",
        )
    expect = raw.get("expect", {})
    pattern = expect.get("output_matches")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"expect.output_matches: bad regular expression: {exc}",
                file=str(path),
                key_path=key_path,
                line=line,
                hint="write a Python regular expression",
            ) from exc
    return Step(
        run=source,
        host=StepHost(raw.get("host", "node")),
        sudo=bool(raw.get("sudo", False)),
        timeout_s=float(parse_duration_s(raw.get("timeout", DEFAULT_STEP_TIMEOUT))),
        exit_codes=tuple(expect.get("exit_codes", (0,))),
        output_matches=pattern,
        ignore_errors=bool(raw.get("ignore_errors", False)),
        name=raw.get("name", ""),
        key_path=key_path,
        _template=template,
    )


def load_playbook_file(
    path: Path, kind: PlaybookKind | str, *, scheduler: str | None = None
) -> Playbook:
    """Load playbook `kind` from the file at `path`.

    When `scheduler` is given and the file names another scheduler, that is an error.
    Raises ConfigError (file, line, key path, hint) for an unreadable file, invalid YAML,
    a schema violation (schemas/playbook.schema.json), a bad template or regular
    expression, an unknown template variable, or a file without that playbook.
    """
    kind = PlaybookKind(kind)
    text, doc = _read(path)
    file_scheduler = doc.get("scheduler")
    if scheduler is not None and file_scheduler is not None and file_scheduler != scheduler:
        raise ConfigError(
            f"written for scheduler {file_scheduler!r}, but the pool uses {scheduler!r}",
            file=str(path),
            line=_line_of(text, ["scheduler"]),
            key_path="scheduler",
            hint="point the pool at a playbook for its scheduler, or fix `scheduler`",
        )
    raw = doc["playbooks"].get(kind.value)
    if raw is None:
        raise ConfigError(
            f"no {kind.value!r} playbook in this file",
            file=str(path),
            key_path="playbooks",
            hint=f"add playbooks.{kind.value}, or point the pool's playbooks.{kind.value} elsewhere",
        )
    steps = tuple(
        _build_step(step, path=path, text=text, parts=["playbooks", kind.value, "steps", i])
        for i, step in enumerate(raw["steps"])
    )
    return Playbook(kind=kind, scheduler=file_scheduler, source=str(path), steps=steps)


def builtin_playbook_path(scheduler: str) -> Path | None:
    """playbooks/<scheduler>.yaml when it exists; None for `none` (no remote steps)."""
    path = data_dir("playbooks") / f"{scheduler}.yaml"
    return path if path.is_file() else None


def load_playbook(
    scheduler: str, kind: PlaybookKind | str, *, override_path: Path | None = None
) -> Playbook | None:
    """The playbook to run for `kind` ("cordon", "drain", "drain_check", "uncordon",
    "diagnostics", "reset_gpu": the built-in playbooks/<kind>.yaml whatever the scheduler).

    override_path (a pool's playbooks.<kind>, already resolved against fleet.yaml's
    directory) wins over the built-in playbooks/<scheduler>.yaml. Returns None when there is
    nothing to run remotely: scheduler `none` without an override, or a built-in file
    without that kind. Raises ConfigError as load_playbook_file does, and for a scheduler
    that has no built-in file and no override.
    """
    kind = PlaybookKind(kind)
    if override_path is not None:
        return load_playbook_file(Path(override_path), kind, scheduler=scheduler)
    if kind in NODE_KINDS:  # one built-in for every scheduler
        return load_playbook_file(data_dir("playbooks") / f"{kind.value}.yaml", kind)
    if scheduler == "none":
        return None
    path = builtin_playbook_path(scheduler)
    if path is None:
        raise ConfigError(
            f"no built-in playbooks for scheduler {scheduler!r}",
            key_path="pools.<pool>.scheduler",
            hint="use none, slurm or kubernetes, or set pools.<pool>.playbooks",
        )
    text, doc = _read(path)
    if kind.value not in doc["playbooks"]:
        return None
    return load_playbook_file(path, kind, scheduler=scheduler)
