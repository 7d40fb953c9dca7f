"""The Azure reconciler role in docs/policies covers what the store asks of Azure when it
signs the agent bundle's read-only SAS on a token credential (a managed identity or a
workload identity, no account key): a user delegation key, which is an action of the
storage account's blob service (Azure Storage, "Create a user delegation SAS"; Azure
resource provider operations, Microsoft.Storage)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import UserDelegationKey

from navarch.stores import azure as azure_store

ROLE = Path(__file__).resolve().parents[2] / "docs" / "policies" / "azure-reconciler-role.json"
#: The RBAC action of each BlobServiceClient call the store makes.
ACTION = {
    "get_user_delegation_key": (
        "Microsoft.Storage/storageAccounts/blobServices/generateUserDelegationKey/action"
    )
}


class _TokenCredential:
    """A token credential: it has no account key."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise AssertionError("no token is fetched in this test")


class _Blob:
    def __init__(self, name: str) -> None:
        self.url = f"https://acct.blob.core.windows.net/fleet/{name}"


class _Container:
    credential = _TokenCredential()
    primary_endpoint = "https://acct.blob.core.windows.net/fleet"
    account_name = "acct"

    def get_blob_client(self, name: str) -> _Blob:
        return _Blob(name)


def test_bundle_sas_on_a_token_credential_needs_only_actions_the_reconciler_role_grants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    class RecordingService:
        def __init__(self, url: str, credential: Any) -> None:
            self.url = url

        def get_user_delegation_key(self, start: Any, expiry: Any) -> UserDelegationKey:
            calls.append("get_user_delegation_key")
            key = UserDelegationKey()
            key.signed_oid, key.signed_tid = "oid", "tid"
            key.signed_start, key.signed_expiry = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
            key.signed_service, key.signed_version = "b", "2021-08-06"
            key.value = base64.b64encode(b"k" * 32).decode()
            return key

    monkeypatch.setattr(azure_store, "BlobServiceClient", RecordingService)
    store = azure_store.AzureBlobStore("acct", "fleet", "research", client=_Container())  # type: ignore[arg-type]
    url = store.presigned_get_url("agent/0.1.0-x.pyz", 3600)
    assert "sp=r" in url and "skoid=oid" in url  # a read-only user-delegation SAS
    role = json.loads(ROLE.read_text())
    assert calls == ["get_user_delegation_key"]
    assert {ACTION[c] for c in calls} - set(role["Actions"]) == set()
    assert any("storageAccounts/" in scope for scope in role["AssignableScopes"])
