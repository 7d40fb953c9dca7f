"""Compute Engine's physical hosts: where an instance sits, and handing a faulty host back.

Kept apart from navarch.providers.gcp (launch, list, terminate) so the host facts have one
home. Sources: the v1 Instance resource, resourceStatus.physicalHost ("blockId/subBlockId/
hostId") and resourceStatus.physicalHostTopology {cluster, block, subblock, host} ("Instances
within the same block experience low network latency"); instances.reportHostAsFaulty
(POST .../zones/{zone}/instances/{instance}/reportHostAsFaulty, body {disruptionSchedule:
IMMEDIATE, faultReasons: [{behavior, description}]}; "Required field, only allows
IMMEDIATE"), taken only for a running reservation-bound A4X/A4/A3 Ultra VM
(cloud.google.com/ai-hypercomputer/docs/manage/report-faulty-host).
"""

from __future__ import annotations

from google.cloud import compute_v1

from navarch.textsafe import node_text

#: The faultReasons behavior for each hardware fault kind (navarch.fleet.remedies
#: HARDWARE_FAULT_KINDS); the library's enum: PERFORMANCE, SILENT_DATA_CORRUPTION,
#: UNRECOVERABLE_GPU_ERROR, CHIP_ERROR. Every GPU fault navarch hands back is an
#: unrecoverable GPU error; a kind not listed is reported as one too.
BEHAVIOR = "UNRECOVERABLE_GPU_ERROR"

#: Compute Engine caps a fault reason's description; navarch's is one short line.
DESCRIPTION_MAX_CHARS = 200


def host_of(inst: compute_v1.Instance) -> tuple[str | None, tuple[str, ...]]:
    """(host id, topology) of a listed instance: physicalHost as the host id, and
    physicalHostTopology's cluster, block, subblock, host (coarse to fine, empty levels
    dropped). (None, ()) when Compute Engine fills neither (most VMs outside reserved
    A3/A4 capacity)."""
    if "resource_status" not in inst:
        return None, ()
    rs = inst.resource_status
    host = rs.physical_host or None
    topology: tuple[str, ...] = ()
    if "physical_host_topology" in rs:
        t = rs.physical_host_topology
        topology = tuple(x for x in (t.cluster, t.block, t.subblock, t.host) if x)
    return host, topology


def report_request(
    project: str, zone: str, instance: str, fault: str, request_id: str
) -> compute_v1.ReportHostAsFaultyInstanceRequest:
    """The instances.reportHostAsFaulty request for one instance: disruption IMMEDIATE
    (the only value the API takes), one fault reason (BEHAVIOR, "navarch: <fault>")."""
    return compute_v1.ReportHostAsFaultyInstanceRequest(
        project=project,
        zone=zone,
        instance=instance,
        request_id=request_id,
        instances_report_host_as_faulty_request_resource=compute_v1.InstancesReportHostAsFaultyRequest(
            disruption_schedule="IMMEDIATE",
            fault_reasons=[
                compute_v1.InstancesReportHostAsFaultyRequestFaultReason(
                    behavior=BEHAVIOR,
                    description=node_text(f"navarch: {fault}", DESCRIPTION_MAX_CHARS),
                )
            ],
        ),
    )
