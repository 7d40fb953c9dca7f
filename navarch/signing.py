"""Report signing: HMAC-SHA256 with a per-node key derived from the fleet secret.

Key derivation: node_key = HMAC-SHA256(fleet_secret, "navarch-node-key/v1|<fleet>|<node>").
A node holds only its own key (delivered in its user-data), so a compromised node cannot
sign for another; the reconciler derives every node's key from the fleet secret.
Canonical form: JSON of the report without its "signature" field, keys sorted, no spaces,
UTF-8 (RFC 8785-like; our reports hold only strings, integers, floats, bools and null).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

ALG = "HMAC-SHA256"


def derive_node_key(fleet_secret: bytes, fleet: str, node: str) -> bytes:
    """32-byte key for one node. fleet_secret: the fleet's secret bytes (>= 16 recommended)."""
    msg = f"navarch-node-key/v1|{fleet}|{node}".encode()
    return hmac.new(fleet_secret, msg, hashlib.sha256).digest()


def canonical_bytes(report: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: the report minus "signature", canonical JSON."""
    body = {k: v for k, v in report.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(report: Mapping[str, Any], node_key: bytes) -> dict[str, Any]:
    """Return a copy of report with its "signature" field set."""
    value = hmac.new(node_key, canonical_bytes(report), hashlib.sha256).hexdigest()
    signed = dict(report)
    signed["signature"] = {"alg": ALG, "value": value}
    return signed


def verify(report: Mapping[str, Any], node_key: bytes) -> bool:
    """True when the report carries a valid signature for node_key (constant-time compare)."""
    sig = report.get("signature")
    if not isinstance(sig, Mapping) or sig.get("alg") != ALG or not isinstance(sig.get("value"), str):
        return False
    expected = hmac.new(node_key, canonical_bytes(report), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, sig["value"])
