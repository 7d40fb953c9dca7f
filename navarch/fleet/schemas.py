"""The JSON Schemas of schemas/: loaded once, validators that resolve cross-file $refs, and
a schema error in words.

schemas/*.schema.json are the single source of truth for the shapes navarch reads (the
fleet file, health reports, plans, status and history documents). load_schema gives one
as a dict; validator_for a cached Draft 2020-12 validator whose "integer" means a whole
number; apply_defaults fills in the defaults a schema declares; schema_error turns one error of fleet.yaml into a ConfigError naming the file,
the line, the key path and what to do (dotted and line_for are the key-path helpers it
shares with navarch.fleet.load's own cross-field errors).

A JSON Schema error in words that never quote the value that failed.

jsonschema's own messages start with the instance ("'root:x:0:0:...' is not of type
'object'"), so a file read by mistake (a playbook path pointing at /etc/passwd or the
fleet secret) would come back in the error. These messages name what the schema wanted
and the kind of value found; key names (which a key path shows anyway) are the only text
of the document they repeat.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from navarch.errors import ConfigError
from navarch.redact import is_secret_path
from navarch.resources import data_dir

__all__ = [
    "apply_defaults",
    "describe",
    "dotted",
    "kind_of",
    "line_for",
    "load_schema",
    "schema_error",
    "validator_for",
]

# --- loading --------------------------------------------------------------------------


@cache
def _registry() -> Registry:
    resources = []
    root = data_dir("schemas")
    for path in sorted(root.rglob("*.schema.json")):
        doc = json.loads(path.read_text())
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Load schemas/<name> as a dict (e.g. "fleet.schema.json")."""
    doc: dict[str, Any] = json.loads((data_dir("schemas") / name).read_text())
    return doc


def _whole_number(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


#: Draft 2020-12 counts 3.0 as an integer (a number with a zero fractional part), but YAML
#: and JSON load it as a float, which then reaches range() and list sizes as one: in our
#: schemas "integer" means a whole number written without a decimal point.
_StrictValidator: Any = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _whole_number),
)


@cache
def validator_for(name: str) -> jsonschema.Draft202012Validator:
    """A Draft 2020-12 validator for schemas/<name>, with cross-file $refs resolved.

    Built once per schema and reused: the reconciler checks thousands of reports per run.
    Local "#/$defs/..." references are inlined first (the schemas are not recursive), which
    makes each validation about a third cheaper than resolving them on every use. Its
    "integer" is strict: 3.0 is not one (see _StrictValidator).
    """
    validator: jsonschema.Draft202012Validator = _StrictValidator(
        _inline_local_refs(load_schema(name)),
        registry=_registry(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )
    return validator


def _inline_local_refs(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int = 0) -> Any:
        if depth > 50:
            raise ValueError("schema nests too deep to inline (is it recursive?)")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and "/" not in ref[8:]:
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return walk({**defs[ref[8:]], **rest}, depth + 1)
            return {k: walk(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema)
    return inlined


def apply_defaults(instance: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> None:
    """Fill in, in place, the `default` of every object property `instance` lacks, following
    local $refs (root: the whole schema they point into). JSON Schema only annotates
    defaults; navarch applies them, so the loader reads one complete document."""
    if "$ref" in schema and schema["$ref"].startswith("#/"):
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        apply_defaults(instance, target, root)
        return
    if not isinstance(instance, dict):
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            apply_defaults(instance[key], sub, root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in instance.items():
            if key not in schema.get("properties", {}):
                apply_defaults(value, extra, root)


# --- key paths and their lines --------------------------------------------------------


def dotted(path: tuple[Any, ...] | list[Any]) -> str:
    """A key path as people write it: ("pools", "train", "zones", 0) -> pools.train.zones[0]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


def line_for(lines: Mapping[tuple[Any, ...], int], path: tuple[Any, ...]) -> int | None:
    """The 1-based line of `path` in a document whose key paths map to lines (the nearest
    enclosing key's line when `path` itself has none), None when nothing encloses it."""
    while True:
        if path in lines:
            return lines[path]
        if not path:
            return None
        path = path[:-1]


# --- a schema error in words -----------------------------------------------------------


def _float_for_integer(error: jsonschema.ValidationError) -> bool:
    """A number with a decimal point where the schema wants a whole number (3.0)."""
    wanted = error.validator_value if error.validator == "type" else ()
    return isinstance(error.instance, float) and "integer" in (
        [wanted] if isinstance(wanted, str) else list(wanted)
    )


#: Keys fleet.yaml once took and no longer does, by key path (an int stands for any list
#: index): what the key did and what to write instead, so an old file is told more than
#: "unknown key".
_RETIRED_KEYS: dict[tuple[Any, ...], tuple[str, str]] = {
    ("health", "remedies", int, "window"): (
        "a remedies row's `window` was never applied: occurrences counts the fault's "
        "observations in a row (a healthy report starts the count again), not within a window",
        "remove window from the row; to wait longer before acting use occurrences (in a "
        "row) or wait (a duration since the fault was first seen)",
    ),
}


def _retired(path: tuple[Any, ...]) -> tuple[str, str] | None:
    """(message, hint) when `path` ends in a retired key of _RETIRED_KEYS, else None."""
    for pattern, words in _RETIRED_KEYS.items():
        tail = path[-len(pattern) :]
        if len(tail) == len(pattern) and all(
            isinstance(part, int) if want is int else part == want
            for part, want in zip(tail, pattern, strict=True)
        ):
            return words
    return None


def _hint_for(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return "remove it, or check its spelling against schemas/fleet.schema.json"
    if error.validator == "required":
        return "add the missing key"
    if _float_for_integer(error):
        return "write a whole number without a decimal point: 3, not 3.0"
    if error.validator == "maximum":
        return f"use at most {error.validator_value:,}; see the key's description"
    if error.validator in ("type", "enum", "const", "pattern", "oneOf"):
        return "see the key's description in schemas/fleet.schema.json"
    return "see schemas/fleet.schema.json"


def schema_error(
    err: jsonschema.ValidationError, source: Path, lines: Mapping[tuple[Any, ...], int]
) -> ConfigError:
    """One fleet.yaml schema error as a ConfigError: the file, the line (`lines` maps key
    paths to 1-based lines), the key path, jsonschema's message made readable (an unknown
    key with its nearest spelling, a oneOf's accepted forms, a whole number written 3.0)
    and a hint naming schemas/fleet.schema.json. An inline secret's value is never echoed
    (navarch.redact, navarch.fleet.schemas)."""
    err_path = tuple(err.absolute_path)
    message = err.message
    hint = _hint_for(err)
    if err.validator == "additionalProperties":
        allowed = set(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - allowed) if isinstance(err.instance, dict) else []
        if unknown:
            err_path = err_path + (unknown[0],)
            message = f"unknown key {unknown[0]!r}"
            near = difflib.get_close_matches(unknown[0], sorted(allowed), n=1, cutoff=0.6)
            if near:
                hint = f"did you mean `{near[0]}`?"
            retired = _retired(err_path)
            if retired is not None:
                message, hint = retired
    elif err.validator == "not" and "propertyNames" in err.schema_path:
        # The only negated key pattern is the reserved navarch- prefix of labels.
        err_path = err_path + (err.instance,)
        message = (
            f"key {err.instance!r} is reserved: navarch-* tags mark the instances "
            "navarch owns, and a label of that name would disown them"
        )
        hint = "rename the label to a key that does not start with navarch-"
    elif _float_for_integer(err):
        message = f"{err.instance!r} is not a whole number"
    elif err.validator in ("oneOf", "anyOf"):
        # jsonschema's "is not valid under any of the given schemas" names no choice.
        forms = [_form(alt, err.schema.get("$defs", {})) for alt in err.validator_value]
        message = f"{err.instance!r} is none of the accepted forms: {'; or '.join(forms)}"
    if is_secret_path(tuple(err.absolute_path)):  # an inline secret is never echoed
        if err.validator in ("oneOf", "anyOf"):
            message = message.replace(repr(err.instance), kind_of(err.instance), 1)
        else:
            message = describe(err)
    return ConfigError(
        message,
        file=str(source),
        line=line_for(lines, err_path),
        key_path=dotted(err_path),
        hint=hint,
    )


def _form(alt: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """One alternative of a oneOf/anyOf in words: "one of 1, 2, 3", "an integer >= 0",
    "a string like 10%", "a mapping with key env"."""
    if "const" in alt:
        return json.dumps(alt["const"])
    if "enum" in alt:
        return "one of " + ", ".join(json.dumps(v) for v in alt["enum"])
    if "$ref" in alt:
        name = str(alt["$ref"]).rsplit("/", 1)[-1]
        return {
            "duration": "a duration like 90s, 5m, 1h",
            "secretRef": "{env: VAR} or {file: PATH}",
        }.get(name, name)
    kind = alt.get("type")
    if kind == "object":
        keys = ", ".join(alt.get("required", ())) or "any keys"
        return f"a mapping with key {keys}"
    if kind == "integer":
        low = alt.get("minimum")
        return "an integer" + (f" >= {low}" if low is not None else "")
    if kind == "string" and "pattern" in alt:
        pattern = str(alt["pattern"])
        examples = {"^[0-9]{1,3}%$": "a percentage like 25%", "^https?://": "an http(s) URL"}
        return examples.get(pattern, f"a string matching {pattern}")
    if kind == "null":
        return "null"
    return f"a {kind}" if kind else "see the schema"


def kind_of(value: Any) -> str:
    """The JSON kind of `value` in words: a string, an integer, a mapping, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _keys(value: Any) -> str:
    return ", ".join(repr(str(k)) for k in value)


def describe(err: jsonschema.ValidationError) -> str:
    """err as one line that quotes no value of the document: "the value is not one of
    ['node', 'head']", "must be of type object (found a string)". Schema keywords
    jsonschema does not name here get "the value is not valid here (<keyword>)"."""
    v, want, inst = err.validator, err.validator_value, err.instance
    found = f"found {kind_of(inst)}"
    if v == "type":
        wanted = " or ".join(want) if isinstance(want, list) else str(want)
        return f"must be of type {wanted} ({found})"
    if v == "enum":
        return f"the value is not one of {json.dumps(want)}"
    if v == "const":
        return f"the value must be {json.dumps(want)}"
    if v == "pattern":
        return f"the value does not match {want!r}"
    if v == "format":
        return f"the value is not a valid {want}"
    if v in ("minLength", "maxLength"):
        return f"the value is too {'short' if v == 'minLength' else 'long'} ({v} {want})"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        return f"the value breaks {v} {want}"
    if v in ("minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties"):
        return f"the {'list' if 'Items' in v else 'mapping'} breaks {v} {want}"
    if v == "required" or v == "dependentRequired":
        return str(err.message)  # "'run' is a required property": the schema's key name
    if v in ("additionalProperties", "unevaluatedProperties") and isinstance(inst, dict):
        allowed = set(err.schema.get("properties", {}))
        return (
            f"Additional properties are not allowed ({_keys(k for k in inst if k not in allowed)})"
        )
    if v in ("oneOf", "anyOf", "allOf", "not", "if", "then", "else"):
        return f"{found}, which is none of the forms the schema accepts here ({v})"
    return f"the value is not valid here ({v})"
