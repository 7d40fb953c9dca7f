"""navarch.redact: what an assistant is shown of fleet.yaml and of navarch's documents."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from navarch.fleet.schemas import load_schema
from navarch.redact import REDACTED, is_secret_path, redact_json, redact_text, redact_yaml


def _secret_refs(node: Any, path: tuple[Any, ...], defs: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Key paths of fleet.schema.json whose value is a secret named by {env} or {file}
    (a secretRef, or the same two forms written out), so may be written inline."""
    out: list[tuple[Any, ...]] = []
    if not isinstance(node, dict):
        return out
    refs = [node.get("$ref")] + [alt.get("$ref") for alt in node.get("oneOf", ())]
    forms = {tuple(alt.get("required", ())) for alt in node.get("oneOf", ())}
    if "#/$defs/secretRef" in refs or {("env",), ("file",)} <= forms:
        out.append(path)
    for key, sub in node.get("properties", {}).items():
        out += _secret_refs(sub, path + (key,), defs)
    if isinstance(node.get("items"), dict):
        out += _secret_refs(node["items"], path + (0,), defs)
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/") and ref != "#/$defs/secretRef" and len(path) < 6:
        out += _secret_refs(defs[ref.rsplit("/", 1)[1]], path, defs)
    return out


def test_every_secret_the_fleet_schema_names_is_redacted_when_written_inline():
    schema = load_schema("fleet.schema.json")
    paths = _secret_refs(schema, (), schema["$defs"])
    assert {("secret",), ("notify", 0, "url"), ("notify", 0, "secret")} <= set(paths)
    assert all(is_secret_path(p) for p in paths), paths


def test_a_redacted_fleet_yaml_keeps_every_line_and_every_reference():
    text = (
        "fleet: demo\n"
        "secret:\n  file: .navarch/fleet.secret\n"
        "notify:\n"
        "  - type: slack  # was https://hooks.slack.com/services/T1/B2/abcdefghijkl\n"
        "    url: 'https://hooks.slack.com/services/T1/B2/abcdefghijkl'\n"
        "  - type: pagerduty\n    routing_key: |\n      0123456789abcdef0123456789abcdef\n"
        "  - type: webhook\n    url: {env: HOOK_URL}\n    secret: inline-hmac-key\n"
        "  - type: teams\n    options: {channel: gpu, api_token: t0k3n-abcdef}\n"
        "providers:\n  lambda: {type: lambda, api_key_env: LAMBDA_KEY, ssh_key_name: ops}\n"
        "metrics:\n  pushgateway: https://ci:hunter22@push.example.com\n"
    )
    out = redact_yaml(text)
    assert out.count("\n") == text.count("\n")
    for secret in ("abcdefghijkl", "0123456789abcdef", "inline-hmac-key", "t0k3n", "hunter22"):
        assert secret not in out, secret
    doc = yaml.safe_load(out)
    assert doc["secret"] == {"file": ".navarch/fleet.secret"}
    assert doc["notify"][2]["url"] == {"env": "HOOK_URL"}
    assert doc["notify"][1]["routing_key"] == REDACTED
    assert doc["notify"][3]["options"] == {"channel": "gpu", "api_token": REDACTED}
    assert doc["providers"]["lambda"]["api_key_env"] == "LAMBDA_KEY"
    assert doc["providers"]["lambda"]["ssh_key_name"] == "ops"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("posted to https://hooks.slack.com/services/T01/B02/XyZ123abc456", "XyZ123abc456"),
        ("see https://discord.com/api/webhooks/123/abcDEF-ghi", "abcDEF-ghi"),
        ("Authorization: Bearer eyJhbGciOi.abc.def-1234567890", "eyJhbGciOi"),
        ("token xoxb-1234567890-abcdefghij in a message", "xoxb-1234567890"),
        ("key AKIAABCDEFGHIJKLMNOP leaked", "AKIAABCDEFGHIJKLMNOP"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789 pushed", "ghp_abcdefghij"),
        ("GET https://api.example.com/v1?x=1&token=s3cr3t-value", "s3cr3t-value"),
        ("pushing to https://ci:hunter22@push.example.com", "hunter22"),
        ("password=correct-horse-battery", "correct-horse"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaA",
        ),
    ],
)
def test_well_known_secret_shapes_are_redacted_in_free_text(text: str, secret: str) -> None:
    assert secret not in redact_text(text)
    assert REDACTED in redact_text(text)


def test_documents_keep_what_is_not_secret_and_lose_the_literals_they_are_given():
    doc = {
        "store": "s3://fleet-state/prod",
        "inventory_fingerprint": "915d41e4f04542d4",
        "plan_fingerprint": "pf-4f40effad031727d9ef9980a",
        "events": [{"reason": "operator: key 5e1f0c0ffee5e1f0c0ffee", "api_key_env": "K"}],
        "options": {"webhook_url": "https://example.com/x"},
    }
    out = redact_json(doc, literals=["5e1f0c0ffee5e1f0c0ffee"])
    assert out["store"] == doc["store"]
    assert out["inventory_fingerprint"] == doc["inventory_fingerprint"]
    assert out["plan_fingerprint"] == doc["plan_fingerprint"]
    assert out["events"][0] == {"reason": f"operator: key {REDACTED}", "api_key_env": "K"}
    assert out["options"]["webhook_url"] == REDACTED


def test_a_schema_error_at_a_secret_key_never_echoes_the_inline_secret(tmp_path):
    from navarch import api
    from tests.support.mcp_client import REPO

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        (REPO / "fleet.example.yaml").read_text()
        + "notify:\n  - type: slack\n    url: hooks.slack.com/services/T1/B2/sekrit123\n"
        + "  - type: pagerduty\n    routing_key: inline-routing-key-9\n"
    )
    problems = api.validate(fleet).problems
    assert [p.split(": ")[1] for p in problems] == ["notify[0].url", "notify[1].routing_key"]
    assert "a string is none of the accepted forms: an http(s) URL" in problems[0]
    for p in problems:
        assert "sekrit123" not in p and "inline-routing-key-9" not in p
