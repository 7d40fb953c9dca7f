"""A JSON Schema error in words that never quote the value that failed.

jsonschema's own messages start with the instance ("'root:x:0:0:...' is not of type
'object'"), so a file read by mistake (a playbook path pointing at /etc/passwd or the
fleet secret) would come back in the error. These messages name what the schema wanted
and the kind of value found; key names (which a key path shows anyway) are the only text
of the document they repeat.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

__all__ = ["describe", "kind_of"]


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
