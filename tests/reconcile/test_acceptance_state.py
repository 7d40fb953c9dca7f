"""What acceptance leaves in navarch's state survives the state document: the acceptance cordon, and the multi-node NCCL result with the run it belongs to, its text made plain."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from navarch.planner.model import ActionReason, Cordon, Memory, NodeMemory
from navarch.reconcile.codec import memory_from_json, memory_to_json
from navarch.report.acceptance import AcceptanceResult, AcceptanceStatus

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def test_the_acceptance_cordon_and_the_pair_result_round_trip_and_the_result_text_is_plain() -> (
    None
):
    result = AcceptanceResult(
        "nccl_multi_node",
        AcceptanceStatus.FAIL,
        29.61,
        50.0,
        "GB/s",
        "2.19.6",
        "below the floor\n\x1b[31m50 GB/s",
        detail={"peer": "demo-train-0001"},
    )
    nm = NodeMemory(
        "demo-train-0003",
        "train",
        "i-3",
        cordon=Cordon(ActionReason.ACCEPTANCE, T0),
        peer_test=result,
        peer_run="boot-7/0",
    )
    doc = json.loads(json.dumps(memory_to_json(Memory("demo").with_node(nm))))
    back = memory_from_json(doc).node("demo-train-0003")
    assert back is not None
    assert back.cordon == nm.cordon and back.peer_run == "boot-7/0"
    assert back.peer_test is not None
    assert (back.peer_test.status, back.peer_test.figure, back.peer_test.threshold) == (
        AcceptanceStatus.FAIL,
        29.61,
        50.0,
    )
    assert "\n" not in back.peer_test.reason and "\x1b" not in back.peer_test.reason
    assert back.peer_test.detail == {"peer": "demo-train-0001"}
