"""Secrets out of what navarch shows: fleet.yaml text, JSON documents and free text.

One helper for every answer that leaves the house through an assistant (navarch.mcp.server):
the fleet.yaml resource, tool results and validation problems. It knows two things:

- the keys of fleet.yaml that carry a secret when written inline (schemas/fleet.schema.json:
  `secret`, a sink's `url` ("A Slack webhook URL is a secret"), `secret` (the webhook's
  HMAC key) and `routing_key` (PagerDuty), and any key named like a credential in a plugin
  sink's `options` or a plugin provider's settings). A secretRef (`{env: VAR}` or
  `{file: PATH}`) names a secret and is kept: the name is not the secret.
- the shapes of well-known secrets in free text: Slack and Discord webhook URLs, Slack,
  GitHub and AWS access tokens, `Bearer` tokens, credentials in a URL's userinfo or
  query, PEM private keys, and `password=...`-style assignments; plus any literal the
  caller knows (the fleet secret itself).

Every redacted value becomes REDACTED; nothing here raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

__all__ = [
    "REDACTED",
    "is_secret_key",
    "is_secret_path",
    "redact_json",
    "redact_text",
    "redact_yaml",
]

REDACTED = "[redacted]"

#: Key names whose scalar value is a secret wherever they stand (credential-like names in a
#: plugin's options, a provider's settings, or a report's free-form evidence).
_SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(secret|token|password|passwd|passphrase|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|routing[_-]?key|webhook([_-]?url)?|credentials?|auth(orization)?"
    r"|signing[_-]?key|client[_-]?secret|bearer)($|[_-])"
)
#: Names that point at a secret rather than hold it (a secretRef's env/file, the Lambda
#: provider's api_key_env, an SSH key's file or name): kept.
_REFERENCE_NAME = re.compile(r"(?i)(^(env|file|path)$|_(env|file|path|name|names)$)")

#: fleet.yaml key paths (None = any key or index) whose scalar value is a secret, from
#: schemas/fleet.schema.json: the fleet secret, and a notify sink's url, secret and
#: routing_key.
_SECRET_PATHS: tuple[tuple[str | None, ...], ...] = (
    ("secret",),
    ("notify", None, "url"),
    ("notify", None, "secret"),
    ("notify", None, "routing_key"),
)

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole block.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
            re.S,
        ),
        REDACTED,
    ),
    # Slack incoming webhooks and workflow triggers; Discord webhooks.
    (
        re.compile(
            r"https?://hooks\.slack(-gov)?\.com/(services|workflows|triggers)/[^\s\"'<>`]*",
            re.I,
        ),
        REDACTED,
    ),
    (
        re.compile(r"https?://(\w+\.)?discord(app)?\.com/api/webhooks/[^\s\"'<>`]*", re.I),
        REDACTED,
    ),
    # Slack tokens, GitHub tokens, AWS access key ids, JWTs.
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), REDACTED),
    (re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    # Bearer / Basic credentials in a header or a log line.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    # user:password@ in a URL.
    (
        re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:\"'<>]+:[^\s/@\"'<>]+@"),
        r"\1" + REDACTED + "@",
    ),
    # credential-like query parameters (?token=..., &sig=...).
    (
        re.compile(
            r"(?i)([?&](token|access_token|api_key|apikey|key|sig|signature|secret|password|code"
            r"|x-goog-signature|x-amz-signature|x-amz-credential|x-amz-security-token)=)"
            r"[^&\s\"'<>#]+"
        ),
        r"\1" + REDACTED,
    ),
    # password = ..., api_key: ... in free text (not a YAML key that names a reference).
    (
        re.compile(
            r"(?i)\b(password|passwd|secret|token|api[_-]?key|routing[_-]?key|private[_-]?key)"
            r"([ \t]*[=:][ \t]*)(?![\"']?[\[{\s])([\"']?)[^\s\"',;}]{6,}\3"
        ),
        r"\1\2" + REDACTED,
    ),
)


def is_secret_key(name: str) -> bool:
    """True when a mapping key named `name` holds a secret by its name (token, password,
    api_key, webhook_url, ...) and does not merely point at one (api_key_env, key_file)."""
    return bool(_SECRET_NAME.search(name)) and not _REFERENCE_NAME.search(name)


def redact_text(text: str, literals: Iterable[str] = ()) -> str:
    """`text` with every known secret shape and every literal in `literals` (at least 6
    characters; shorter ones would hit ordinary words) replaced by REDACTED."""
    for lit in sorted({s for s in literals if len(s) >= 6}, key=len, reverse=True):
        text = text.replace(lit, REDACTED)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _matches(path: tuple[Any, ...], pattern: tuple[str | None, ...]) -> bool:
    if len(path) != len(pattern):
        return False
    return all(p is None or p == str(k) for k, p in zip(path, pattern, strict=False))


def is_secret_path(path: tuple[Any, ...]) -> bool:
    """Whether fleet.yaml's scalar at key path `path` (keys and list indexes) is a secret:
    a key of _SECRET_PATHS, or any credential-named key (is_secret_key)."""
    if any(_matches(path, p) for p in _SECRET_PATHS):
        return True
    return bool(path) and isinstance(path[-1], str) and is_secret_key(path[-1])


def redact_json(doc: Any, literals: Iterable[str] = ()) -> Any:
    """A copy of a JSON-shaped value with secrets redacted: the scalar of a credential-named
    key (is_secret_key) whole, every other string by redact_text. Keys are kept."""
    lits = tuple(literals)

    def walk(node: Any, key: str | None) -> Any:
        if isinstance(node, Mapping):
            return {k: walk(v, str(k)) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v, key) for v in node]
        if isinstance(node, str):
            if key is not None and is_secret_key(key) and node:
                return REDACTED
            return redact_text(node, lits)
        return node

    return walk(doc, None)


def redact_yaml(text: str, literals: Iterable[str] = ()) -> str:
    """fleet.yaml text with its secrets redacted, every line where it was (line numbers
    still match the file): each scalar at a secret-bearing key (the schema's, or a
    credential-named key) becomes "[redacted]", then redact_text runs over the whole text
    (comments included). Text that is not YAML gets redact_text only."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    spans: list[tuple[int, int, int]] = []  # (start, end, newlines inside) of secret scalars

    def walk(node: yaml.Node | None, path: tuple[Any, ...], depth: int) -> None:
        if node is None or depth > 64:
            return
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                walk(value_node, path + (getattr(key_node, "value", ""),), depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,), depth + 1)
        elif isinstance(node, yaml.ScalarNode) and node.value and is_secret_path(path):
            start, end = node.start_mark.index, node.end_mark.index
            spans.append((start, end, text.count("\n", start, end)))

    walk(root, (), 0)
    out = text
    for start, end, newlines in sorted(spans, reverse=True):
        out = out[:start] + f'"{REDACTED}"' + "\n" * newlines + out[end:]
    return redact_text(out, literals)
