"""fleet.yaml's text read and composed: the file's bytes as UTF-8 text, then plain data
with the 1-based line of every key path, refusing duplicate keys and a file whose aliases
expand past MAX_YAML_NODES or nest past MAX_YAML_DEPTH (navarch.fleet.load builds the
FleetSpec from what this returns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from navarch.errors import ConfigError
from navarch.fleet.schemas import dotted

__all__ = [
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "compose_with_lines",
    "read_fleet_text",
]

#: libyaml's parser when PyYAML was built with it: about seven times faster on a fleet of
#: 100 pools (read by every plan, apply and status), with the same resolver and
#: constructor, so the same data. Its error messages differ, so a text it refuses is parsed
#: again by the pure-Python parser, whose message (or data) stands.
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Most YAML nodes a fleet file may hold once its aliases are expanded. An alias is a
#: reference, so nine nested lists of nine aliases (a "billion laughs" of 300 bytes) expand
#: to 9**9 nodes that validation and every later walk would visit: refused here, while
#: the composed graph is still small. bench/scale.py's fleet of 100 pools is about 3,000.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and lists: fleet.schema.json nests about ten levels.
MAX_YAML_DEPTH = 64
_Where = tuple[int, tuple[Any, ...]]


def compose_with_lines(text: str, filename: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse YAML into plain data plus a map from key path to 1-based line number.

    Raises ConfigError on YAML syntax errors, duplicate keys, and a file that expands
    (through aliases) to more than MAX_YAML_NODES nodes or nests deeper than
    MAX_YAML_DEPTH, naming the line where the limit was passed; nothing is expanded first.
    """
    loader = _FAST_LOADER
    try:
        try:
            root = yaml.compose(text, Loader=loader)
        except yaml.YAMLError:
            loader = yaml.SafeLoader
            root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            f"not valid YAML: {getattr(exc, 'problem', exc)}",
            file=filename,
            line=mark.line + 1 if mark else None,
            hint="fix the YAML syntax",
        ) from exc
    lines: dict[tuple[Any, ...], int] = {}
    seen_nodes: set[int] = set()
    visits = [0]  # nodes walked, each alias expanded

    def walk(
        node: yaml.Node | None, path: tuple[Any, ...], line: int = 1, at: _Where | None = None
    ) -> None:
        """Record lines and check duplicate keys; at: where the first alias on the way to
        this node is used (the line and path an expansion error names)."""
        if node is None:
            return
        lines.setdefault(path, node.start_mark.line + 1)
        if at is None and id(node) in seen_nodes and isinstance(node, yaml.CollectionNode):
            at = (line, path)  # a collection met twice is an alias: blame where it is used
        seen_nodes.add(id(node))
        visits[0] += 1
        if visits[0] > MAX_YAML_NODES or len(path) > MAX_YAML_DEPTH:
            where, key = at or (lines[path], path)
            raise _too_big(filename, where, key, deep=len(path) > MAX_YAML_DEPTH)
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                key = key_node.value
                if key in seen:
                    raise ConfigError(
                        f"duplicate key {key!r}",
                        file=filename,
                        line=key_node.start_mark.line + 1,
                        key_path=dotted(path + (key,)),
                        hint="keep one of them",
                    )
                seen.add(key)
                lines[path + (key,)] = key_node.start_mark.line + 1
                walk(value_node, path + (key,), key_node.start_mark.line + 1, at)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,), lines[path], at)

    walk(root, ())
    data = yaml.load(text, Loader=loader) if root is not None else None  # a safe loader
    return data, lines


def _too_big(filename: str, line: int, path: tuple[Any, ...], *, deep: bool) -> ConfigError:
    """The ConfigError for a file past MAX_YAML_DEPTH (deep) or MAX_YAML_NODES."""
    if deep:
        return ConfigError(
            f"nests deeper than {MAX_YAML_DEPTH} levels",
            file=filename,
            line=line,
            key_path=dotted(path[:8]) + " ...",
            hint="a fleet file nests about ten levels; flatten it",
        )
    return ConfigError(
        f"expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases of aliases?)",
        file=filename,
        line=line,
        key_path=dotted(path),
        hint="write the values out, or use fewer nested aliases (*name)",
    )


def read_fleet_text(source: Path) -> str:
    """The fleet file's text. Raises ConfigError naming the file for an unreadable file,
    and the line and byte offset of the first byte that is not UTF-8 (YAML 1.2 streams
    are Unicode; navarch reads UTF-8 only)."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read fleet file: {exc.strerror}", file=str(source)) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset {exc.start}",
            file=str(source),
            line=data.count(b"\n", 0, exc.start) + 1,
            hint="save the file as UTF-8, e.g. with iconv -f latin1 -t utf-8",
        ) from None
