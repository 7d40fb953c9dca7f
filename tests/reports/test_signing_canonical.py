"""signing.canonical_bytes takes a stdlib fast path when it can; its bytes (or its refusal)
are always rfc8785's, on generated JSON-like values and on the edge cases named in the
module docstring (non-ASCII keys, long integers, integral and extreme floats, non-string
keys, tuples)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from navarch.report import signing

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_keys = st.text(max_size=6) | st.sampled_from(["a", "\ue000", "\U0001f600", "b\u00e9"])
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=20,
)


def _jcs(value: dict[str, Any]) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except (ValueError, RecursionError) as exc:
        return type(exc)


#: The C encoders canonical_bytes runs on: orjson (the reconciler) and the stdlib's (the
#: agent bundle, which has no orjson).
ENCODERS = ("orjson", "stdlib")


@contextlib.contextmanager
def _encoder(name: str) -> Iterator[None]:
    """canonical_bytes on the named encoder for the block (orjson is the module's own)."""
    saved = signing._encode, signing._decode
    if name == "stdlib":
        signing._encode, signing._decode = signing._encode_stdlib, signing._decode_stdlib
    try:
        yield
    finally:
        signing._encode, signing._decode = saved


@pytest.fixture(params=ENCODERS)
def encoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs once on each encoder."""
    with _encoder(request.param):
        yield str(request.param)


def _ours(value: dict[str, Any]) -> bytes | type[Exception]:
    try:
        return signing.canonical_bytes(value)
    except (ValueError, RecursionError) as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=5))
def test_canonical_bytes_equal_rfc8785_on_either_encoder(body: dict[str, Any]) -> None:
    body.pop("signature", None)
    expected = _jcs(body)
    for name in ENCODERS:  # one drawn value checks both: drawing it is most of the cost
        with _encoder(name):
            assert _ours(body) == expected, name


@pytest.mark.parametrize(
    "value",
    [
        45.0,
        -0.0,
        1e16,
        1e-5,
        0.0001,
        123.456,
        1e21,
        2**53 - 1,
        2**53,
        -(2**53),
        "\ue000",
        "\U0001f600",
        "caf\u00e9",
        '\x7f\x00\n\t"\\',
        "\ud800",
        math.inf,
        (1, 2),
        {"\ue000": 1, "\U0001f600": 2},
        {1: "int key"},
        {"a": [1.5, {"b": 1e-7}]},
        1.5e-5,
        -1.5e-5,
        1e-6,
        1.2345678901234568e16,
        1234567890123456.5,
        float("nan"),
        [float("nan")],
        {"text": "1e-05 0.00001 -0.0 1234567890123456"},
        {"s": '\\"x:1.0]', "n": -0.05},
    ],
)
@pytest.mark.usefixtures("encoder")
def test_edge_cases_equal_rfc8785(value: Any) -> None:
    assert _ours({"v": value}) == _jcs({"v": value})


@pytest.mark.usefixtures("encoder")
def test_a_plain_report_takes_the_fast_path() -> None:
    report = {"node": "n1", "sequence": 7, "gpus": [{"utilization_pct": 40.5}], "notice": None}
    assert signing._fast_canonical(report) == rfc8785.dumps(report)


@pytest.mark.parametrize(
    "report",
    [
        {"node": "n1", "sequence": 7, "gpus": [{"temperature_c": 40.0}], "notice": None},
        {"message": "caf\u00e9 \ud7ff", "reading": 1e-7, "signature": {"alg": "old"}},
        {},
    ],
    ids=["plain", "rfc8785_path", "empty"],
)
@pytest.mark.usefixtures("encoder")
def test_the_stored_text_of_a_signed_report_parses_to_it_and_verifies(report: dict) -> None:
    key = signing.derive_node_key(b"fleet-secret-for-tests", "demo", "n1")
    signed, stored = signing.sign_for_store(report, key)
    parsed = json.loads(stored)
    assert parsed == signed == signing.sign(report, key)
    assert signing.verify(parsed, key)
    assert stored.startswith(signing.canonical_bytes(report)[:-1])
