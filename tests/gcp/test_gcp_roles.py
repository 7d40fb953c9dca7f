"""The GCP reconciler's IAM in docs/policies: the custom role granted on the project holds no
permission on service accounts (there it would reach every service account in the
project), and the two it needs are bound on one service account each: actAs on each pool's
node service account, signBlob on the reconciler's own (IAM, "Service account permissions";
Cloud Storage, "V4 signing process" through signBlob)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "docs" / "policies"


def _bindings() -> list[dict[str, Any]]:
    doc = json.loads((POLICIES / "gcp-service-account-bindings.json").read_text())
    return list(doc["bindings"])


def _granted_on(permission: str) -> set[str]:
    return {b["resource"] for b in _bindings() if permission in b["role"]["includedPermissions"]}


def test_project_wide_reconciler_role_grants_nothing_on_service_accounts() -> None:
    role = yaml.safe_load((POLICIES / "gcp-reconciler-role.yaml").read_text())
    assert [p for p in role["includedPermissions"] if p.startswith("iam.serviceAccounts.")] == []


def test_act_as_is_bound_on_each_pools_node_account_and_sign_blob_on_the_reconcilers_own() -> None:
    fleet = yaml.safe_load((REPO / "fleet.gcp.example.yaml").read_text())
    node_accounts = {
        pool["gcp"]["service_account"]
        for pool in fleet["pools"].values()
        if "service_account" in pool.get("gcp", {})
    }
    assert node_accounts and _granted_on("iam.serviceAccounts.actAs") == node_accounts
    signers = _granted_on("iam.serviceAccounts.signBlob")
    members = {b["member"].removeprefix("serviceAccount:") for b in _bindings()}
    assert len(members) == 1 and signers == members  # its own account, no other
    for binding in _bindings():
        assert binding["role"]["includedPermissions"] in (
            ["iam.serviceAccounts.actAs"],
            ["iam.serviceAccounts.signBlob"],
        )
