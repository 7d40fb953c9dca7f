"""EC2 preflight: what a pool's launches need, checked by reads before the first launch.

Per pool placement on EC2 (navarch.providers.preflight.LaunchNeeds), in its region:
- each zone exists in the region (DescribeAvailabilityZones);
- the AMI exists in the region (DescribeImages);
- the instance profile exists (IAM GetInstanceProfile);
- a subnet for each zone: the pool's declared subnet exists and lies in that zone, or,
  with none declared, the default VPC has a default subnet there (DescribeSubnets);
- the security groups exist (DescribeSecurityGroups);
- the key pair exists (DescribeKeyPairs);
- each instance type is offered in each zone (DescribeInstanceTypeOfferings, LocationType
  availability-zone);
- the family's running-instances vCPU quota holds one node, and the pool's max
  (Service Quotas GetServiceQuota with DescribeInstanceTypes' vCPUs): optional; a quota
  Service Quotas does not answer is passed over, a failed read is a warning.
A read the policy denies (UnauthorizedOperation, AccessDenied) is a SKIPPED finding naming
the IAM action (docs/policies/aws-reconciler.json grants them all); any other failed read
is a WARNING. Sources: EC2 API reference (the actions above, "Error codes"), Service
Quotas API reference (GetServiceQuota, NoSuchResourceException), the EC2 vCPU quota codes
of the "Amazon EC2 service quotas" page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from navarch.errors import AuthError, ConfigError, ProviderError
from navarch.providers.aws_errors import map_error
from navarch.providers.optional import answer_excerpt
from navarch.providers.preflight import (
    Check,
    Finding,
    LaunchNeeds,
    NotFoundAnswer,
    ReadFailure,
    Reads,
    Verdict,
)

__all__ = ["QUOTA_CODES", "preflight_findings", "quota_code"]

#: Running-instances vCPU quota codes by family letter(s), on-demand and spot (Amazon EC2
#: service quotas: "Running On-Demand P instances" L-417A185B, "All P Spot Instance
#: Requests" L-7212CCBC, G and VT L-DB2E81BA / L-3819A6DF, standard families L-1216C47A /
#: L-34B43A08). A family not listed has no quota check.
QUOTA_CODES: dict[str, tuple[str, str]] = {
    "p": ("L-417A185B", "L-7212CCBC"),
    "g": ("L-DB2E81BA", "L-3819A6DF"),
    "vt": ("L-DB2E81BA", "L-3819A6DF"),
    **{f: ("L-1216C47A", "L-34B43A08") for f in ("a", "c", "d", "h", "i", "m", "r", "t", "z")},
}

#: Error codes meaning "the thing named does not exist" (EC2 API reference "Error codes";
#: IAM NoSuchEntity; Service Quotas NoSuchResourceException).
NOT_FOUND = frozenset(
    {
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Malformed",
        "InvalidAMIID.Unavailable",
        "NoSuchEntity",
        "InvalidSubnetID.NotFound",
        "InvalidSubnetID.Malformed",
        "InvalidGroup.NotFound",
        "InvalidGroupId.Malformed",
        "InvalidKeyPair.NotFound",
        "NoSuchResourceException",
    }
)


def quota_code(instance_type: str, spot: bool) -> str | None:
    """The vCPU quota code for an instance type's family: the letters before its first
    digit ("p5.48xlarge" -> "p" -> L-417A185B, "vt1.3xlarge" -> "vt"); None for a family
    without one in QUOTA_CODES ("inf2", "trn1")."""
    family = re.match(r"[a-z]*", instance_type)
    codes = QUOTA_CODES.get(family.group(0) if family else "")
    return None if codes is None else codes[1 if spot else 0]


def classify(exc: Exception) -> ReadFailure | None:
    """An EC2, IAM or Service Quotas read's exception -> how it failed, by the one error map
    (navarch.providers.aws_errors.map_error): AuthError is denied, a NOT_FOUND code is not
    found, any other botocore error failed; None for an exception that is no AWS answer."""
    if not isinstance(exc, BotoCoreError | ClientError | ResponseParserError):
        return None
    err = map_error(exc)
    if isinstance(err, AuthError):
        return ReadFailure.DENIED
    if isinstance(err, ProviderError) and err.code in NOT_FOUND:
        return ReadFailure.NOT_FOUND
    return ReadFailure.FAILED


def preflight_findings(
    provider: str,
    session: Any,
    client: Callable[[str], Any],
    needs: Sequence[LaunchNeeds],
    region_of: Callable[[str], str],
    options_of: Callable[..., Any],
) -> list[Finding]:
    """Every finding for these pools (see the module docstring). session: the provider's
    boto3 session (for IAM and Service Quotas); client(region): its EC2 client;
    region_of(zone) and options_of(options, pool=...) (AwsPoolOptions.from_mapping): the
    provider's own readings of a zone and a pool's aws: section. Never raises
    ProviderError: a failed read is a finding."""
    reads = Reads(provider, classify)
    for need in needs:
        try:
            regions = {region_of(z) for z in need.zones}
            opts = options_of(need.options, pool=need.pool)
        except ConfigError as exc:
            reads.add(
                Check.ZONE,
                Verdict.GAP,
                f"pool {need.pool}",
                str(exc),
                exc.hint or "fix fleet.yaml",
                key_path=exc.key_path or "",
            )
            continue
        for region in sorted(regions):
            zones = tuple(z for z in need.zones if region_of(z) == region)
            _check_pool(reads, session, client(region), region, need, zones, opts)
    return reads.findings


def _check_pool(
    reads: Reads,
    session: Any,
    ec2: Any,
    region: str,
    need: LaunchNeeds,
    zones: tuple[str, ...],
    opts: Any,
) -> None:
    """One pool's checks in one region."""
    key = need.key_prefix or f"pools.{need.pool}"
    known = _zones(reads, ec2, region, need.pool)
    for zone in zones:
        if known is not None and zone not in known:
            reads.add(
                Check.ZONE,
                Verdict.GAP,
                f"pool {need.pool}: zone {zone}",
                f"no such zone in {region}",
                f"use one of {', '.join(sorted(known))}",
                key_path=f"{key}.zones",
            )
    zones = tuple(z for z in zones if known is None or z in known)
    _image(reads, ec2, need.pool, opts.ami, region, key)
    if opts.iam_instance_profile:
        _profile(reads, session, need.pool, opts.iam_instance_profile, key)
    _subnets(reads, ec2, need.pool, zones, opts, key)
    for group in opts.security_group_ids:
        subject = f"pool {need.pool}: security group {group}"
        try:
            with reads.read("ec2:DescribeSecurityGroups", subject, Check.SECURITY_GROUP):
                ec2.describe_security_groups(GroupIds=[group])
        except NotFoundAnswer:
            reads.add(
                Check.SECURITY_GROUP,
                Verdict.GAP,
                subject,
                f"not found in {region}",
                "create it or name an existing one",
                key_path=f"{key}.aws.security_group_ids",
            )
    if opts.key_name:
        subject = f"pool {need.pool}: key pair {opts.key_name}"
        try:
            with reads.read("ec2:DescribeKeyPairs", subject, Check.KEY_PAIR):
                ec2.describe_key_pairs(KeyNames=[opts.key_name])
        except NotFoundAnswer:
            reads.add(
                Check.KEY_PAIR,
                Verdict.GAP,
                subject,
                f"not found in {region}",
                f"aws ec2 import-key-pair --key-name {opts.key_name} ... (or name another)",
                key_path=f"{key}.aws.key_name",
            )
    _offerings(reads, ec2, need, zones, key)
    _quota(reads, session, ec2, region, need)


def _zones(reads: Reads, ec2: Any, region: str, pool: str) -> set[str] | None:
    subject = f"pool {pool}: zones of {region}"
    with reads.read("ec2:DescribeAvailabilityZones", subject, Check.ZONE):
        answer = ec2.describe_availability_zones(AllAvailabilityZones=True)
        return {z["ZoneName"] for z in answer.get("AvailabilityZones", ())}
    return None


def _image(reads: Reads, ec2: Any, pool: str, ami: str, region: str, key: str) -> None:
    subject = f"pool {pool}: image {ami}"
    found = True
    try:
        with reads.read("ec2:DescribeImages", subject, Check.IMAGE):
            found = bool(ec2.describe_images(ImageIds=[ami]).get("Images"))
    except NotFoundAnswer:
        found = False
    if not found:
        reads.add(
            Check.IMAGE,
            Verdict.GAP,
            subject,
            f"no such image in {region}",
            f"copy the image to {region} or name one there",
            key_path=f"{key}.aws.ami",
        )


def _profile(reads: Reads, session: Any, pool: str, profile: str, key: str) -> None:
    name = profile.rsplit("/", 1)[-1] if profile.startswith("arn:") else profile
    subject = f"pool {pool}: instance profile {name}"
    try:
        with reads.read("iam:GetInstanceProfile", subject, Check.INSTANCE_PROFILE):
            session.client("iam").get_instance_profile(InstanceProfileName=name)
    except NotFoundAnswer:
        reads.add(
            Check.INSTANCE_PROFILE,
            Verdict.GAP,
            subject,
            "no such instance profile",
            f"aws iam create-instance-profile --instance-profile-name {name} and add "
            "the node role (docs/aws.md)",
            key_path=f"{key}.aws.iam_instance_profile",
        )


def _subnets(
    reads: Reads, ec2: Any, pool: str, zones: tuple[str, ...], opts: Any, key: str
) -> None:
    """A subnet for each zone: the declared one exists and lies in the zone, or, with none
    declared, the default VPC has a default subnet in the zone."""
    declared = bool(opts.subnets or opts.subnet_id)
    subject = f"pool {pool}: subnets"
    try:
        with reads.read("ec2:DescribeSubnets", subject, Check.SUBNET):
            if declared:
                ids = sorted({s for z in zones if (s := opts.subnet_for(z))})
                answer = ec2.describe_subnets(SubnetIds=ids) if ids else {"Subnets": []}
            else:
                answer = ec2.describe_subnets(
                    Filters=[{"Name": "default-for-az", "Values": ["true"]}]
                )
            zone_of = {s["SubnetId"]: s["AvailabilityZone"] for s in answer.get("Subnets", ())}
            default_in = set(zone_of.values())
            for zone in zones:
                _subnet_for(reads, pool, zone, opts, zone_of, default_in, declared, key)
    except NotFoundAnswer as exc:
        reads.add(
            Check.SUBNET,
            Verdict.GAP,
            subject,
            f"a declared subnet does not exist ({answer_excerpt(exc, 160)})",
            "name subnets that exist in the pool's zones",
            key_path=f"{key}.aws.subnets",
        )


def _subnet_for(
    reads: Reads,
    pool: str,
    zone: str,
    opts: Any,
    zone_of: dict[str, str],
    default_in: set[str],
    declared: bool,
    key: str,
) -> None:
    subject = f"pool {pool}: subnet for {zone}"
    if not declared:
        if zone not in default_in:
            reads.add(
                Check.SUBNET,
                Verdict.GAP,
                subject,
                f"no subnet declared and no default subnet in {zone}",
                f"set aws.subnets.{zone}: subnet-... (a subnet in {zone})",
                key_path=f"{key}.aws.subnets",
            )
        return
    subnet = opts.subnet_for(zone)
    if subnet is None:
        reads.add(
            Check.SUBNET,
            Verdict.GAP,
            subject,
            "no subnet declared for this zone",
            f"add aws.subnets.{zone}: subnet-... (a subnet in {zone}), or drop the zone",
            key_path=f"{key}.aws.subnets",
        )
    elif zone_of.get(subnet) != zone:
        reads.add(
            Check.SUBNET,
            Verdict.GAP,
            subject,
            f"{subnet} lies in {zone_of.get(subnet)}",
            f"name a subnet in {zone}",
            key_path=f"{key}.aws.subnets",
        )


def _offerings(reads: Reads, ec2: Any, need: LaunchNeeds, zones: tuple[str, ...], key: str) -> None:
    if not zones:
        return
    subject = f"pool {need.pool}: instance types"
    offered: set[tuple[str, str]] = set()
    with reads.read("ec2:DescribeInstanceTypeOfferings", subject, Check.OFFERING):
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": list(need.instance_types)},
                {"Name": "location", "Values": list(zones)},
            ],
        )
        for page in pages:
            offered |= {(o["InstanceType"], o["Location"]) for o in page["InstanceTypeOfferings"]}
        for itype in need.instance_types:
            for zone in zones:
                if (itype, zone) not in offered:
                    reads.add(
                        Check.OFFERING,
                        Verdict.GAP,
                        f"pool {need.pool}: {itype} in {zone}",
                        "instance type not offered in this zone",
                        f"drop {zone} from zones or {itype} from instance_types "
                        "(or move them to a placement of their own)",
                        key_path=f"{key}.instance_types",
                    )


def _quota(reads: Reads, session: Any, ec2: Any, region: str, need: LaunchNeeds) -> None:
    """The family's vCPU quota against one node and the pool's max (optional)."""
    for itype in need.instance_types:
        code = quota_code(itype, need.spot)
        if code is None:
            continue
        subject = f"pool {need.pool}: vCPU quota {code} in {region} ({itype})"
        try:
            with reads.read("servicequotas:GetServiceQuota", subject, Check.QUOTA):
                quota = session.client("service-quotas", region_name=region).get_service_quota(
                    ServiceCode="ec2", QuotaCode=code
                )["Quota"]["Value"]
                with reads.read("ec2:DescribeInstanceTypes", subject, Check.QUOTA):
                    vcpus = ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"][0][
                        "VCpuInfo"
                    ]["DefaultVCpus"]
                    _judge_quota(reads, subject, float(quota), int(vcpus), need.max_nodes)
        except NotFoundAnswer:
            continue  # Service Quotas does not publish this quota here: nothing to check


def _judge_quota(reads: Reads, subject: str, quota: float, vcpus: int, max_nodes: int) -> None:
    ask = "request an increase in the Service Quotas console"
    if quota < vcpus:
        reads.add(
            Check.QUOTA,
            Verdict.GAP,
            subject,
            f"{quota:g} vCPUs allowed, one node needs {vcpus}",
            ask,
        )
    elif quota < vcpus * max_nodes:
        reads.add(
            Check.QUOTA,
            Verdict.WARNING,
            subject,
            f"{quota:g} vCPUs allowed, the pool's max needs {vcpus * max_nodes}",
            ask,
        )
