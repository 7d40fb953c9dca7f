"""The S3 store retries in botocore's standard mode and leaves the attempt count to the
operator's AWS_MAX_ATTEMPTS, as every AWS SDK does (no server is contacted here)."""

from __future__ import annotations

import pytest

from navarch.stores.s3 import S3Store


def _retries(monkeypatch: pytest.MonkeyPatch, attempts: str | None) -> dict[str, object]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    if attempts is None:
        monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    else:
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", attempts)
    return dict(S3Store("navarch-state").client.meta.config.retries)


def test_the_s3_store_takes_its_attempts_from_aws_max_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _retries(monkeypatch, "1") == {"mode": "standard", "total_max_attempts": 1}
    # Unset: the standard mode's own count (3 attempts), not one navarch chose.
    assert _retries(monkeypatch, None) == {"mode": "standard"}
