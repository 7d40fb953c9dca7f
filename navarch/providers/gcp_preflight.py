"""Compute Engine preflight: what a pool's launches need, checked by reads before the first
launch (the GCE side of navarch.providers.preflight; aws_preflight is EC2's).

For the provider's project, then per pool placement (LaunchNeeds):
- the project is reachable (projects.get), and its GPUS_ALL_REGIONS quota holds one node;
- each zone exists (zones.get);
- each machine type is offered in each zone (machineTypes.get: a 404 is "not offered
  here"); its answer's accelerators, or the pool's gcp.accelerators for an N1 machine,
  give the node's GPUs;
- the boot image resolves (images.get, or images.getFromFamily for ".../family/F");
- the regional GPU quota of the node's accelerator holds one node and the pool's max
  (regions.get quotas, the metric of GPU_QUOTA_METRICS, PREEMPTIBLE_ for spot): optional,
  an accelerator not in the table is passed over.
A read the role denies (401, 403 other than rate limits) is a SKIPPED finding naming the
permission (docs/policies/gcp-reconciler-role.yaml grants them all); any other failed read
is a WARNING. Sources: Compute Engine API v1 reference (projects.get, zones.get,
machineTypes.get, images.get / getFromFamily, regions.get: Region.quotas), "GPU quota"
and "Spot VMs" (Spot VMs count against the preemptible GPU quota).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.protobuf.json_format import ParseError

from navarch.providers.gcp_error_map import RATE_REASONS, error_codes
from navarch.providers.preflight import (
    Check,
    Finding,
    LaunchNeeds,
    NotFoundAnswer,
    ReadFailure,
    Reads,
    Verdict,
    judge_quota,
)

__all__ = ["GPU_QUOTA_METRICS", "classify", "image_reference", "preflight_findings"]

#: Accelerator type -> its regional quota metric (Compute Engine "GPU quota"; the metric
#: names of compute_v1 Quota.Metric). Spot VMs use the metric with PREEMPTIBLE_ before it.
GPU_QUOTA_METRICS: dict[str, str] = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
    "nvidia-tesla-p4": "NVIDIA_P4_GPUS",
    "nvidia-tesla-k80": "NVIDIA_K80_GPUS",
}
_ASK = "request an increase on the Quotas page of the Google Cloud console"
_IMAGE = re.compile(
    r"(?:.*?/)??(?:projects/(?P<project>[^/]+)/)?global/images/(?P<rest>(?:family/)?[^/]+)"
)


def classify(exc: Exception) -> ReadFailure | None:
    """How a Compute Engine read failed: 404 NOT_FOUND, 401 / 403 (not a rate limit) and
    google-auth errors DENIED, any other API or transport error, or an answer that is not
    the API's JSON (an outage page), FAILED; anything else is not the cloud's answer (None)."""
    if isinstance(exc, gexc.NotFound):
        return ReadFailure.NOT_FOUND
    if isinstance(exc, auth_exc.GoogleAuthError | gexc.Unauthorized):
        return ReadFailure.DENIED
    if isinstance(exc, gexc.Forbidden):
        rate = any(c in RATE_REASONS for c in error_codes(exc))
        return ReadFailure.FAILED if rate else ReadFailure.DENIED
    if isinstance(exc, gexc.GoogleAPIError | OSError | ValueError | ParseError):
        return ReadFailure.FAILED
    return None


def image_reference(image: str, project: str) -> tuple[str, str, bool] | None:
    """A pool's gcp.image -> (project, image or family name, is a family), the project
    defaulting to the provider's; None for a form this check does not read."""
    m = _IMAGE.fullmatch(image)
    if m is None:
        return None
    rest = m["rest"]
    family = rest.startswith("family/")
    return (m["project"] or project, rest.removeprefix("family/"), family)


@dataclass
class _Project:
    """The reads of one preflight, cached across its pools."""

    reads: Reads
    project: str
    client: Callable[[str], Any]
    zones: dict[str, bool] = field(default_factory=dict)
    machine_types: dict[tuple[str, str], tuple[str, int] | None] = field(default_factory=dict)
    quotas: dict[str, dict[str, tuple[float, float]] | None] = field(default_factory=dict)


def preflight_findings(
    provider: str,
    project: str,
    client: Callable[[str], Any],
    needs: Sequence[LaunchNeeds],
    options_of: Callable[[Mapping[str, Any]], Any],
) -> list[Finding]:
    """Every finding for these pools (see the module docstring). client(name) -> the
    provider's compute_v1 client of that name ("ProjectsClient", "ZonesClient",
    "MachineTypesClient", "ImagesClient", "RegionsClient"), with its endpoint and
    credentials; options_of(pool's gcp: mapping) -> GcpPoolOptions. Never raises a cloud
    error: a failed read is a finding."""
    reads = Reads(provider, classify)
    state = _Project(reads, project, client)
    read = _project(state, provider)
    if read is False:
        return reads.findings
    project_quotas = read if isinstance(read, dict) else {}
    for need in needs:
        key = need.key_prefix or f"pools.{need.pool}"
        try:
            opts = options_of(need.options)
        except (KeyError, TypeError, ValueError) as exc:
            reads.add(
                Check.IMAGE,
                Verdict.GAP,
                f"pool {need.pool}",
                f"its gcp: section does not read ({exc})",
                "fix it as docs/gcp.md describes",
                key_path=f"{key}.gcp",
            )
            continue
        zones = tuple(z for z in need.zones if _zone(state, need.pool, z, key))
        _image(state, need.pool, str(opts.image), key)
        gpus = _offerings(state, need, zones, key, opts)
        _gpu_quotas(state, need, zones, gpus, project_quotas)
    return reads.findings


def _project(state: _Project, provider: str) -> dict[str, tuple[float, float]] | bool:
    """projects.get -> the project's quotas by metric, False when there is no such project
    (a GAP: nothing else can be read), True when it could not be read."""
    subject = f"project {state.project}"
    try:
        with state.reads.read("compute.projects.get", subject, Check.ACCOUNT):
            answer = state.client("ProjectsClient").get(project=state.project)
            return {q.metric: (float(q.limit), float(q.usage)) for q in answer.quotas}
    except NotFoundAnswer:
        state.reads.add(
            Check.ACCOUNT,
            Verdict.GAP,
            subject,
            "no such project, or Compute Engine is not enabled in it",
            "name the project's id and enable the Compute Engine API there",
            key_path=f"providers.{provider}.project",
        )
        return False
    return True


def _zone(state: _Project, pool: str, zone: str, key: str) -> bool:
    """zones.get, once per zone -> False only when the zone does not exist (its GAP added)."""
    if zone not in state.zones:
        state.zones[zone] = True
        try:
            with state.reads.read("compute.zones.get", f"zone {zone}", Check.ZONE):
                state.client("ZonesClient").get(project=state.project, zone=zone)
        except NotFoundAnswer:
            state.zones[zone] = False
    if not state.zones[zone]:
        state.reads.add(
            Check.ZONE,
            Verdict.GAP,
            f"pool {pool}: zone {zone}",
            "no such zone",
            "use a zone that `gcloud compute zones list` shows",
            key_path=f"{key}.zones",
        )
    return state.zones[zone]


def _image(state: _Project, pool: str, image: str, key: str) -> None:
    ref = image_reference(image, state.project)
    if ref is None:
        return
    project, name, family = ref
    subject = f"pool {pool}: image {image}"
    permission = "compute.images.getFromFamily" if family else "compute.images.get"
    try:
        with state.reads.read(permission, subject, Check.IMAGE):
            images = state.client("ImagesClient")
            if family:
                images.get_from_family(project=project, family=name)
            else:
                images.get(project=project, image=name)
    except NotFoundAnswer:
        what = "image family" if family else "image"
        state.reads.add(
            Check.IMAGE,
            Verdict.GAP,
            subject,
            f"no such {what} in project {project}",
            f"name an {what} that exists (gcloud compute images list --project {project})",
            key_path=f"{key}.gcp.image",
        )


def _offerings(
    state: _Project, need: LaunchNeeds, zones: tuple[str, ...], key: str, opts: Any
) -> dict[str, tuple[str, int]]:
    """Each machine type in each zone (machineTypes.get) -> machine type -> its node's
    (accelerator type, count), from the answer or the pool's gcp.accelerators."""
    gpus: dict[str, tuple[str, int]] = {}
    for mtype in need.instance_types:
        attached = opts.accelerators.get(mtype)
        if attached is not None:
            gpus[mtype] = (str(attached.type), int(attached.count))
        for zone in zones:
            found = _machine_type(state, need.pool, zone, mtype)
            if found is False:
                state.reads.add(
                    Check.OFFERING,
                    Verdict.GAP,
                    f"pool {need.pool}: {mtype} in {zone}",
                    "machine type not offered in this zone",
                    f"drop {zone} from zones or {mtype} from instance_types "
                    "(or move them to a placement of their own)",
                    key_path=f"{key}.instance_types",
                )
            elif isinstance(found, tuple) and mtype not in gpus:
                gpus[mtype] = found
    return gpus


def _machine_type(state: _Project, pool: str, zone: str, mtype: str) -> tuple[str, int] | bool:
    """machineTypes.get, once per (zone, type) -> its built-in (accelerator, count), True
    when it has none or could not be read, False when the zone does not offer it."""
    if (zone, mtype) not in state.machine_types:
        subject = f"pool {pool}: {mtype} in {zone}"
        answer: tuple[str, int] | None = None
        try:
            with state.reads.read("compute.machineTypes.get", subject, Check.OFFERING):
                got = state.client("MachineTypesClient").get(
                    project=state.project, zone=zone, machine_type=mtype
                )
                for accel in got.accelerators:
                    answer = (accel.guest_accelerator_type, int(accel.guest_accelerator_count))
        except NotFoundAnswer:
            state.machine_types[(zone, mtype)] = None
            return False
        state.machine_types[(zone, mtype)] = answer
    return state.machine_types[(zone, mtype)] or True


def _gpu_quotas(
    state: _Project,
    need: LaunchNeeds,
    zones: tuple[str, ...],
    gpus: Mapping[str, tuple[str, int]],
    project_quotas: Mapping[str, tuple[float, float]],
) -> None:
    """The node's GPU quota in each region of the pool's zones, and GPUS_ALL_REGIONS."""
    regions = sorted({z.rsplit("-", 1)[0] for z in zones})
    for mtype, (accel, count) in sorted(gpus.items()):
        if "GPUS_ALL_REGIONS" in project_quotas and not need.spot:
            limit, used = project_quotas["GPUS_ALL_REGIONS"]
            subject = f"pool {need.pool}: GPU quota GPUS_ALL_REGIONS ({mtype})"
            judge_quota(state.reads, subject, "GPUs", limit, used, count, need.max_nodes, _ASK)
        metric = GPU_QUOTA_METRICS.get(accel)
        if metric is None:
            continue  # an accelerator whose quota metric navarch does not know
        metric = f"PREEMPTIBLE_{metric}" if need.spot else metric
        for region in regions:
            quotas = _region_quotas(state, need.pool, region)
            if quotas is None or metric not in quotas:
                continue
            limit, used = quotas[metric]
            subject = f"pool {need.pool}: GPU quota {metric} in {region} ({mtype})"
            judge_quota(state.reads, subject, "GPUs", limit, used, count, need.max_nodes, _ASK)


def _region_quotas(
    state: _Project, pool: str, region: str
) -> dict[str, tuple[float, float]] | None:
    """regions.get, once per region -> its quotas by metric (None: not read)."""
    if region not in state.quotas:
        state.quotas[region] = None
        try:
            with state.reads.read("compute.regions.get", f"region {region}", Check.QUOTA):
                got = state.client("RegionsClient").get(project=state.project, region=region)
                state.quotas[region] = {
                    q.metric: (float(q.limit), float(q.usage)) for q in got.quotas
                }
        except NotFoundAnswer:
            pass  # the zone check has said it already
    return state.quotas[region]
