"""What a provider can do beyond list, provision and terminate: its capabilities.

Each provider class declares one Capability value (a Flag: members combine with |), the
way cluster-autoscaler's CloudProvider and SkyPilot's CloudImplementationFeatures let a
core ask a cloud what it supports instead of asking which cloud it is. The caller reads
them from the opened providers and hands them to the planner as data
(navarch.planner.context.PlanOptions.capabilities), so the planner never names a cloud.
"""

from __future__ import annotations

import enum


class Capability(enum.Flag):
    """One thing a provider can do; a provider's set is the | of its members.

    UPDATE_TAGS: change an instance's tags/labels in place (EC2 CreateTags, GCE
    setLabels, ARM tags PATCH); without it a label change is drift that replaces the node.
    REBOOT: restart an instance in place through the cloud's API (Provider.reboot).
    RESET_GPU: reset a machine's GPUs itself, without SSH (the local provider's fake GPUs);
    others reset through the reset_gpu playbook.
    INSTANCE_STATUS: list the cloud's own health verdict per instance (Instance.cloud_status).
    MAINTENANCE_NOTICES: list scheduled maintenance events with their deadlines.
    PLACE_BY_HOST: honour ProvisionRequest.avoid_hosts and .block (the local provider's
    simulated racks); a cloud without an API to pick or refuse a host lacks it.
    REPORT_FAULTY_HOST: hand a failed host back to the cloud (Provider.report_faulty_host:
    Compute Engine instances.reportHostAsFaulty, the local provider's record).
    ADOPT: list running instances that carry no navarch tags and write navarch's ownership
    tags on them in place (the Adopter protocol: EC2 CreateTags, GCE setLabels, ARM tags
    PATCH, the machine file), so `navarch adopt` takes them under management unrestarted.
    PREFLIGHT: check what a pool's launches need before the first one (the Preflighter
    protocol: EC2 DescribeImages, DescribeInstanceTypeOfferings, ...), reads only.
    """

    NONE = 0
    UPDATE_TAGS = enum.auto()
    REBOOT = enum.auto()
    RESET_GPU = enum.auto()
    INSTANCE_STATUS = enum.auto()
    MAINTENANCE_NOTICES = enum.auto()
    PLACE_BY_HOST = enum.auto()
    REPORT_FAULTY_HOST = enum.auto()
    ADOPT = enum.auto()
    PREFLIGHT = enum.auto()
