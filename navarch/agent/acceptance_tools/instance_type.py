"""The node's instance type from its cloud's metadata service, so the acceptance tests hold it
to the baseline published for its type (thresholds.BASELINES).

The pool's policy names the instance type when every node of the placement has one
(navarch.agent.bootstrap writes it into agent.yaml); a pool with several types leaves it empty and
the node asks the cloud which one it is:

- AWS (IMDSv2): ``PUT /latest/api/token``, then ``GET /latest/meta-data/instance-type``
  (text, e.g. ``p5.48xlarge``; AWS "Instance metadata categories");
- GCP: ``GET /computeMetadata/v1/instance/machine-type`` with ``Metadata-Flavor: Google``
  (text, ``projects/NUMBER/machineTypes/a3-highgpu-8g``; the last part is the type; GCP
  "View and query VM metadata");
- Azure: ``GET /metadata/instance/compute/vmSize?api-version=2021-02-01&format=text`` with
  ``Metadata: true`` (text, e.g. ``Standard_ND96isr_H100_v5``; Azure IMDS reference).

A service that does not answer gives "" (no baseline: the pool's own floors and the
relative check still apply), never an error. Shipped in the agent bundle: Python 3.9 and
the standard library only.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

from navarch.agent.notices import DEFAULT_BASES, detect_cloud

__all__ = ["read_instance_type"]

#: Longest instance type name kept (the longest published names are about 30 characters);
#: the metadata text is the node's, so it is capped.
MAX_TYPE_CHARS = 64


def _call(url: str, headers: dict[str, str], timeout_s: float, method: str = "GET") -> str:
    """The response body of one request, never through a proxy (link-local endpoints).
    Raises OSError (HTTPError included) or http.client.HTTPException."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    data = b"" if method == "PUT" else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    with opener.open(req, timeout=timeout_s) as resp:
        return str(resp.read(4096).decode(errors="replace"))


def _ask(cloud: str, base: str, timeout_s: float) -> str:
    if cloud == "aws":
        token = _call(
            f"{base}/latest/api/token",
            {"X-aws-ec2-metadata-token-ttl-seconds": "300"},
            timeout_s,
            "PUT",
        )
        return _call(
            f"{base}/latest/meta-data/instance-type",
            {"X-aws-ec2-metadata-token": token},
            timeout_s,
        )
    if cloud == "gcp":
        text = _call(
            f"{base}/computeMetadata/v1/instance/machine-type",
            {"Metadata-Flavor": "Google"},
            timeout_s,
        )
        return text.strip().rsplit("/", 1)[-1]
    return _call(
        f"{base}/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text",
        {"Metadata": "true"},
        timeout_s,
    )


def read_instance_type(
    metadata: str,
    *,
    endpoint: str | None = None,
    timeout_s: float = 0.3,
    dmi_dir: str = "/sys/class/dmi/id",
) -> tuple[str, list[str]]:
    """(the node's instance type or "", errors as text) from the metadata service.

    metadata: "auto" (the cloud from DMI; off-cloud without an endpoint: no request) |
    "aws" | "gcp" | "azure" | "none"; endpoint: base URL override (tests). The answer is
    stripped and cut to MAX_TYPE_CHARS; one that is not a plain name (spaces, control
    characters) is dropped as an error. Never raises.
    """
    if metadata == "none":
        return "", []
    clouds = [metadata]
    if metadata == "auto":
        detected = detect_cloud(dmi_dir)
        if detected is None and endpoint is None:
            return "", []
        clouds = [detected] if detected else ["aws", "gcp", "azure"]
    errors: list[str] = []
    for cloud in clouds:
        base = (endpoint or DEFAULT_BASES.get(cloud, "")).rstrip("/")
        if not base:
            errors.append(f"{cloud}: no metadata service known")
            continue
        try:
            text = _ask(cloud, base, timeout_s).strip()[:MAX_TYPE_CHARS]
        except (OSError, ValueError, http.client.HTTPException) as exc:
            errors.append(f"{cloud}: {type(exc).__name__}: {exc}"[:300])
            continue
        if text and text.isprintable() and " " not in text:
            return text, errors
        errors.append(f"{cloud}: instance type answer {text!r} is not a type name"[:300])
    return "", errors
