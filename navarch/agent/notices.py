"""Spot preemption and maintenance notices from the cloud's instance metadata service.

- AWS (IMDSv2): ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``),
  then with ``X-aws-ec2-metadata-token``: ``GET /latest/meta-data/spot/instance-action``
  (404 = none; ``{"action": "terminate|stop|hibernate", "time": RFC 3339}``) and
  ``GET /latest/meta-data/events/maintenance/scheduled`` (JSON list; entries with
  ``State: active``; ``NotBefore`` like ``21 Jan 2019 09:00:43 GMT``). Source: EC2 user
  guide, "Spot Instance interruption notices" and "Scheduled events".
- GCP: header ``Metadata-Flavor: Google``; ``GET /computeMetadata/v1/instance/preempted``
  (``TRUE``/``FALSE``; a preempted VM has about 30 s) and
  ``GET /computeMetadata/v1/instance/maintenance-event`` (``NONE`` or
  ``MIGRATE_ON_HOST_MAINTENANCE`` / ``TERMINATE_ON_HOST_MAINTENANCE``). Source: Compute
  Engine metadata docs.
- Azure: header ``Metadata: true``; ``GET /metadata/scheduledevents?api-version=2020-07-01``
  -> ``{"Events": [{"EventType": "Preempt|Terminate|Reboot|Redeploy|Freeze", "Resources":
  [vm names], "NotBefore": RFC 1123}]}``. Source: Azure Scheduled Events docs.

The endpoints are link-local: every request has a short timeout and any failure means
"no notice" (logged by the caller), so the agent stays fast off-cloud. ``metadata: auto``
picks the cloud from DMI (``/sys/class/dmi/id``) and does nothing when none matches.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from navarch.report.compat import UTC
from navarch.report.health_report import NoticeKind, NoticeSource, ReportNotice

__all__ = ["Notice", "fetch_notice", "detect_cloud", "DEFAULT_BASES"]

DEFAULT_BASES = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
GCP_PREEMPTION_NOTICE_S = 30


@dataclass(frozen=True)
class Notice:
    """A pending interruption. kind: preemption | maintenance; source: cloud name;
    deadline: aware UTC datetime when known; detail: the cloud's words, <= 512 chars."""

    kind: NoticeKind
    source: str
    deadline: datetime | None
    detail: str

    def to_report(self) -> ReportNotice:
        """The report's ``notice`` (navarch.report.health_report)."""
        return ReportNotice(
            self.kind,
            NoticeSource(self.source),
            self.deadline.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if self.deadline
            else None,
            self.detail[:512],
        )

    def to_json(self) -> dict[str, Any]:
        """The report's ``notice`` object."""
        return self.to_report().to_json()


@dataclass(frozen=True)
class _Reply:
    """The part of an HTTP response the notice readers use."""

    status_code: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise OSError(f"HTTP {self.status_code}: {self.text[:200]}")


class _Session:
    """GET/PUT over urllib, never through a proxy (the endpoints are link-local); the
    agent bundle carries no HTTP library, so the standard library is the client."""

    def __init__(self) -> None:
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _call(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, str] | None = None,
    ) -> _Reply:
        if params:
            url = f"{url}?{urllib.parse.urlencode(params)}"
        data = b"" if method == "PUT" else None
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                return _Reply(resp.status, resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            return _Reply(exc.code, exc.read().decode(errors="replace"))

    def get(
        self,
        url: str,
        *,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, str] | None = None,
    ) -> _Reply:
        return self._call("GET", url, headers, timeout, params)

    def put(self, url: str, *, headers: dict[str, str], timeout: float) -> _Reply:
        return self._call("PUT", url, headers, timeout)


def detect_cloud(dmi_dir: str = "/sys/class/dmi/id") -> str | None:
    """ "aws", "gcp", "azure" or None from DMI vendor strings (no network)."""
    texts = []
    for name in ("sys_vendor", "bios_vendor", "product_name", "board_vendor"):
        try:
            texts.append(Path(dmi_dir, name).read_text().strip())
        except OSError:
            continue
    joined = " ".join(texts)
    if "Amazon" in joined:
        return "aws"
    if "Google" in joined:
        return "gcp"
    if "Microsoft Corporation" in joined:
        return "azure"
    return None


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    text = text.strip()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        pass
    for fmt in ("%d %b %Y %H:%M:%S %Z",):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            pass
    try:
        return parsedate_to_datetime(text).astimezone(UTC)
    except (TypeError, ValueError):
        return None


def _aws(session: Any, base: str, timeout_s: float) -> Notice | None:
    r = session.put(
        f"{base}/latest/api/token",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
        timeout=timeout_s,
    )
    r.raise_for_status()
    hdr = {"X-aws-ec2-metadata-token": r.text}
    r = session.get(f"{base}/latest/meta-data/spot/instance-action", headers=hdr, timeout=timeout_s)
    if r.status_code == 200:
        doc = r.json()
        return Notice(
            NoticeKind.PREEMPTION,
            "aws",
            _parse_time(doc.get("time")),
            f"spot instance-action {doc.get('action')}",
        )
    if r.status_code != 404:
        r.raise_for_status()
    r = session.get(
        f"{base}/latest/meta-data/events/maintenance/scheduled", headers=hdr, timeout=timeout_s
    )
    if r.status_code == 404:
        return None
    r.raise_for_status()
    events = [
        e for e in (r.json() or []) if isinstance(e, dict) and e.get("State", "active") == "active"
    ]
    if not events:
        return None
    events.sort(key=lambda e: _parse_time(e.get("NotBefore")) or datetime.max.replace(tzinfo=UTC))
    e = events[0]
    return Notice(
        NoticeKind.MAINTENANCE,
        "aws",
        _parse_time(e.get("NotBefore")),
        f"{e.get('Code', 'maintenance')}: {e.get('Description', '')}".strip(": "),
    )


def _gcp(session: Any, base: str, timeout_s: float, now: datetime) -> Notice | None:
    hdr = {"Metadata-Flavor": "Google"}
    r = session.get(f"{base}/computeMetadata/v1/instance/preempted", headers=hdr, timeout=timeout_s)
    r.raise_for_status()
    if r.text.strip().upper() == "TRUE":
        return Notice(
            NoticeKind.PREEMPTION,
            "gcp",
            now + timedelta(seconds=GCP_PREEMPTION_NOTICE_S),
            "instance preempted",
        )
    r = session.get(
        f"{base}/computeMetadata/v1/instance/maintenance-event", headers=hdr, timeout=timeout_s
    )
    r.raise_for_status()
    event = r.text.strip()
    if event and event.upper() != "NONE":
        return Notice(NoticeKind.MAINTENANCE, "gcp", None, event)
    return None


def _azure(session: Any, base: str, timeout_s: float, names: tuple[str, ...]) -> Notice | None:
    r = session.get(
        f"{base}/metadata/scheduledevents",
        params={"api-version": "2020-07-01"},
        headers={"Metadata": "true"},
        timeout=timeout_s,
    )
    r.raise_for_status()
    found: list[Notice] = []
    for e in (r.json() or {}).get("Events", []):
        resources = e.get("Resources") or []
        if resources and not any(n and n in resources for n in names):
            continue  # an event for another VM of the same availability set
        etype = str(e.get("EventType", ""))
        kind = (
            NoticeKind.PREEMPTION if etype in ("Preempt", "Terminate") else NoticeKind.MAINTENANCE
        )
        found.append(
            Notice(
                kind,
                "azure",
                _parse_time(e.get("NotBefore")),
                f"{etype} {e.get('EventStatus', '')} {e.get('Description', '')}".strip(),
            )
        )
    if not found:
        return None
    found.sort(
        key=lambda n: (
            n.kind is not NoticeKind.PREEMPTION,
            n.deadline or datetime.max.replace(tzinfo=UTC),
        )
    )
    return found[0]


def fetch_notice(
    metadata: str,
    *,
    endpoint: str | None = None,
    timeout_s: float = 0.3,
    now: datetime | None = None,
    names: tuple[str, ...] = (),
    dmi_dir: str = "/sys/class/dmi/id",
) -> tuple[Notice | None, list[str]]:
    """Ask the metadata service for a pending preemption or maintenance.

    metadata: "auto" | "aws" | "gcp" | "azure" | "none"; endpoint: base URL override
    (every cloud's paths under it); names: this VM's names (Azure resource filter).
    Returns (notice or None, errors as text). Never raises for network errors.
    """
    now = now or datetime.now(UTC)
    if metadata == "none":
        return None, []
    clouds = [metadata]
    if metadata == "auto":
        detected = detect_cloud(dmi_dir)
        if detected is None:
            if endpoint is None:
                return None, []
            clouds = ["aws", "gcp", "azure"]
        else:
            clouds = [detected]
    errors: list[str] = []
    session = _Session()
    for cloud in clouds:
        base = (endpoint or DEFAULT_BASES[cloud]).rstrip("/")
        try:
            if cloud == "aws":
                notice = _aws(session, base, timeout_s)
            elif cloud == "gcp":
                notice = _gcp(session, base, timeout_s, now)
            else:
                notice = _azure(session, base, timeout_s, names)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            errors.append(f"{cloud}: {type(exc).__name__}: {exc}"[:300])
            continue
        if notice is not None:
            return notice, errors
    return None, errors
