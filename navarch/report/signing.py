"""Report signing: HMAC-SHA256 with a per-node key derived from the fleet secret.

Key derivation: node_key = HMAC-SHA256(fleet_secret, "navarch-node-key/v1|<fleet>|<node>").
A node holds only its own key (delivered in its user-data), so a compromised node cannot
sign for another; the reconciler derives every node's key from the fleet secret.

Canonical form (what is signed): the report without its "signature" field, serialised
as RFC 8785 JSON Canonicalization Scheme (JCS) by the `rfc8785` library: keys sorted by
UTF-16 code units, no whitespace, ECMAScript number form, UTF-8. The agent signs the
dict it writes; the reconciler parses the stored bytes and canonicalises what it parsed,
so any JSON serialiser may write the report. JCS refuses what has no canonical form
(lone surrogates, NaN/Infinity, integers beyond +-(2**53 - 1)): canonical_bytes raises
ValueError for those, and such a report can be neither signed nor verified (a signature
over a form the reconciler cannot rebuild would be unverifiable anyway).

Speed: rfc8785 is pure Python (about 150 us for a small report, 3 ms for an 8-GPU one).
canonical_bytes first serialises with a C encoder (orjson where it is installed, as on the
reconciler; the stdlib's otherwise, as in the agent bundle) with sorted keys and no
whitespace, which gives the same bytes as JCS exactly when:
- the output is ASCII (UTF-16 and code-point key order agree);
- every number prints alike in both: an integer within 2**53 - 1 (JCS refuses larger
  ones), a float that is finite, not integral and 1e-4 <= |f| < 1e16 (Python's repr,
  orjson and the ECMAScript form all give the shortest round-trip digits in plain
  decimal there);
- parsing the output back gives the input (keys were strings, nothing was coerced, NaN
  was not written as null).
An integral float (a reading of 40.0 C) prints "40.0" in Python and "40" in ECMAScript:
its ".0" is dropped first, and the parse back proves no string was touched. The numbers
are judged on the text outside strings, where the encoder printed them: an exponent, an
integer part of 16 digits or more, "0.0000" (|f| < 1e-4 printed plainly) or "-0.0"
sends the value to rfc8785. Anything else goes to rfc8785 too, so the result is always
rfc8785's (tests/reports/test_signing_canonical.py checks both encoders on generated
values; `navarch simulate` signs and verifies about 1.4 million 8-GPU reports in its
30-day run, README).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import rfc8785

ALG = "HMAC-SHA256"
#: ".0" ending a JSON value, and what must precede it for it to end an integral float as
#: Python prints it ("40.0", not "-0.0" whose JCS form is "0"): JCS prints the integer.
#: The split on a literal is fast; the tail check runs only where ".0" was found.
_DOT_ZERO = re.compile(rb"\.0(?=[,\]}])")
_INTEGRAL_TAIL = re.compile(rb"[:,\[](?:-?[1-9][0-9]*|0)\Z")
#: A JSON string (in the encoder's output): what it holds is not a number.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: Digits as "0", so that number shapes are found by substring search (C speed).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _plain_numbers(outside: bytes) -> bool:
    """Whether every number in a JSON text without its strings prints alike in the encoder
    and in JCS: no exponent, no integer part of 16 digits or more, no |f| < 1e-4 printed
    plainly ("0.0000"), no -0.0. Substring tests, so a few plain numbers (10.00001, -0.05)
    count as not plain: that costs rfc8785's time, never correctness."""
    shapes = outside.translate(_DIGITS_AS_ZERO)
    return not (
        b"0e" in shapes
        or b"0E" in shapes
        or b"0000000000000000" in shapes
        or b"0.0000" in outside
        or b"-0.0" in outside
    )


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _encode_stdlib(body: dict[str, Any]) -> bytes | None:
    text = _ENCODER.encode(body)
    return text.encode() if text.isascii() else None


def _encode_orjson(body: dict[str, Any]) -> bytes | None:
    data: bytes = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return data if data.isascii() else None


def _decode_stdlib(data: bytes) -> Any:
    return json.loads(data)


_encode: Callable[[dict[str, Any]], bytes | None]
_decode: Callable[[bytes], Any]
try:
    import orjson

    _encode, _decode = _encode_orjson, orjson.loads
except ImportError:  # the agent bundle runs on the stdlib alone
    _encode, _decode = _encode_stdlib, _decode_stdlib


def fast_loads(data: bytes) -> Any:
    """JSON bytes -> value through the decoder canonical_bytes uses (orjson where it is
    installed, else the stdlib's). Raises ValueError for text that is not JSON."""
    return _decode(data)


def _drop_integral_zeros(text: bytes) -> bytes:
    """text with the ".0" of every integral float removed (40.0 -> 40, JCS's form)."""
    parts = _DOT_ZERO.split(text)
    out = [parts[0]]
    for i in range(1, len(parts)):  # not zip(strict=): the agent runs on Python 3.9
        if _INTEGRAL_TAIL.search(parts[i - 1][-20:]) is None:
            out.append(b".0")
        out.append(parts[i])
    return b"".join(out)


def outside_strings(text: bytes) -> bytes:
    """A valid JSON text without its strings (keys and values): what is left is structure,
    numbers and literals. One C split when the text has no escapes, a regex otherwise."""
    if b"\\" in text:
        return _JSON_STRING.sub(b"", text)
    return b"".join(text.split(b'"')[::2])  # no escapes: every quote opens or closes one


def _fast_canonical(body: dict[str, Any]) -> bytes | None:
    """body as JCS through a C encoder, or None when that might differ from rfc8785 (the
    module docstring, "Speed", says when)."""
    try:
        text = _encode(body)
    except (TypeError, ValueError, RecursionError):
        return None
    if text is None:
        return None
    if b".0" in text:
        text = _drop_integral_zeros(text)
    if not _plain_numbers(outside_strings(text)):
        return None
    try:
        again = _decode(text)
    except (ValueError, RecursionError):
        return None
    return text if again == body else None


def derive_node_key(fleet_secret: bytes, fleet: str, node: str) -> bytes:
    """32-byte key for one node. fleet_secret: the fleet's secret bytes (>= 16 recommended)."""
    msg = f"navarch-node-key/v1|{fleet}|{node}".encode()
    return hmac.new(fleet_secret, msg, hashlib.sha256).digest()


def canonical_bytes(report: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: the report minus "signature", RFC 8785 canonical JSON.

    Raises ValueError (rfc8785.CanonicalizationError) for values JCS cannot represent,
    RecursionError for nesting deeper than Python's recursion limit.
    """
    body = {k: v for k, v in report.items() if k != "signature"}
    fast = _fast_canonical(body)
    return fast if fast is not None else rfc8785.dumps(body)


def mac(canonical: bytes, node_key: bytes) -> str:
    """HMAC-SHA256 of canonical bytes under node_key, as 64 lowercase hex digits."""
    return hmac.new(node_key, canonical, hashlib.sha256).hexdigest()


def sign(report: Mapping[str, Any], node_key: bytes) -> dict[str, Any]:
    """Return a copy of report with its "signature" field set.

    Raises ValueError when the report has no canonical form (see canonical_bytes).
    """
    return sign_for_store(report, node_key)[0]


def sign_for_store(report: Mapping[str, Any], node_key: bytes) -> tuple[dict[str, Any], bytes]:
    """The signed copy of report and the bytes to store: the body's canonical JSON with
    the "signature" member appended last. Any JSON reader takes that text, and the verifier
    rebuilds the canonical form from what it parses, so one canonicalisation serves both
    the MAC and the stored text.

    Raises ValueError when the report has no canonical form (see canonical_bytes).
    """
    canonical = canonical_bytes(report)
    signature = {"alg": ALG, "value": mac(canonical, node_key)}
    signed = {k: v for k, v in report.items() if k != "signature"}
    signed["signature"] = signature
    member = f'"signature":{{"alg":"{ALG}","value":"{signature["value"]}"}}'.encode()
    comma = b"," if canonical != b"{}" else b""
    return signed, canonical[:-1] + comma + member + b"}"


def verify_canonical(canonical: bytes, signature: Any, node_key: bytes) -> bool:
    """True when signature ({"alg", "value"}) is valid for canonical under node_key
    (constant-time compare). For callers that already hold canonical_bytes(report)."""
    if (
        not isinstance(signature, Mapping)
        or signature.get("alg") != ALG
        or not isinstance(signature.get("value"), str)
    ):
        return False
    return hmac.compare_digest(mac(canonical, node_key), signature["value"])


def verify(report: Mapping[str, Any], node_key: bytes) -> bool:
    """True when the report carries a valid signature for node_key over its JCS form;
    False also when it has no canonical form."""
    try:
        canonical = canonical_bytes(report)
    except (ValueError, RecursionError):
        return False
    signature = report.get("signature")
    return verify_canonical(canonical, signature, node_key)
