"""EC2 instance topology: where each instance sits in the network fabric.

DescribeInstanceTopology answers, per instance, its NetworkNodes: "hashed" node ids from
the top of the tree to the node closest to the instance (EC2 API reference; the EC2 user
guide, "Amazon EC2 instance topology"). Requests name at most 100 InstanceIds and may not
carry MaxResults with InstanceIds (the API model's documentation). Only some instance
types have a topology (TOPOLOGY_TYPES: the user guide's prerequisites page, 3 network
nodes: p3dn, p4d(e), p5(e/en), g6e, g7e, trn1(n), trn2(u), hpc; 4: p6-b200, p6-b300,
p6e-gb200); for others, and for instances not running, EC2 returns no nodes, so navarch
does not ask. Pure: request building and answer parsing; the call lives in aws.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Instance families EC2 reports a topology for (the part of the type before the dot).
TOPOLOGY_TYPES = frozenset(
    {
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "p6-b300",
        "p6e-gb200",
        "g6e",
        "g7e",
        "trn1",
        "trn1n",
        "trn2",
        "trn2u",
        "hpc6a",
        "hpc6id",
        "hpc7a",
        "hpc7g",
        "hpc8a",
    }
)

#: DescribeInstanceTopology's most InstanceIds per request.
IDS_PER_REQUEST = 100


def has_topology(instance_type: str) -> bool:
    """Whether EC2 reports a topology for this instance type (TOPOLOGY_TYPES)."""
    return instance_type.split(".", 1)[0] in TOPOLOGY_TYPES


def topology_requests(instance_ids: Iterable[str]) -> list[dict[str, Any]]:
    """DescribeInstanceTopology parameters for these instances: InstanceIds in sorted
    batches of IDS_PER_REQUEST, no MaxResults (the API refuses it beside InstanceIds)."""
    ids = sorted(set(instance_ids))
    return [
        {"InstanceIds": ids[i : i + IDS_PER_REQUEST]} for i in range(0, len(ids), IDS_PER_REQUEST)
    ]


def parse_topology(pages: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """instance id -> its NetworkNodes (top of the tree first) from answer pages; an
    instance with no nodes (null or empty: not running, or a type without) is left out."""
    out: dict[str, tuple[str, ...]] = {}
    for page in pages:
        for raw in page.get("Instances") or ():
            nodes: Sequence[str] = raw.get("NetworkNodes") or ()
            if nodes and raw.get("InstanceId"):
                out[str(raw["InstanceId"])] = tuple(str(n) for n in nodes)
    return out
