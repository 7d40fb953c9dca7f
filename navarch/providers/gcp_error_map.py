"""Compute Engine errors translated into navarch's tree: the one error boundary of the GCP
provider (map_error, and gcp_errors, the context every SDK call runs in), and the retry
predicate that keeps capacity and quota codes out of google.api_core's retries.

Sources: GCE API error reasons and operation error codes, GCE "Troubleshooting resource
availability errors" (see each constant).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.protobuf.json_format import ParseError

from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    NavarchError,
    PlacementError,
    ProviderError,
    QuotaError,
    TransientError,
    map_exceptions,
)
from navarch.providers.optional import answer_excerpt

__all__ = [
    "CAPACITY_CODES",
    "GLOBAL_QUOTAS",
    "PLACEMENT_WORDS",
    "QUOTA_CODES",
    "RATE_REASONS",
    "error_codes",
    "gcp_errors",
    "map_error",
    "transient",
]

#: Operation / API error codes that mean "no capacity here now": fall over to the next place.
#: Source: GCE "Troubleshooting resource availability errors" and observed operation errors.
CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "STOCKOUT",
        "insufficientCapacity",
        "resourcePoolExhausted",
    }
)
#: A 400/404 of a call about a zone whose message names one of these is about the place
#: (a machine or accelerator type not offered in the zone): PlacementError, fall over to
#: the next place, which may offer it. Source: GCE errors "Invalid value for field
#: 'resource.machineType' ... does not exist in zone", "The resource
#: 'projects/P/zones/Z/machineTypes/T' was not found", acceleratorTypes alike.
PLACEMENT_WORDS = ("machinetype", "machine type", "acceleratortype", "accelerator type")
#: Quota codes: operation errors use QUOTA_EXCEEDED, synchronous API errors quotaExceeded.
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
#: 403 reasons that are throttling, not a permission problem (GCE API error reasons).
RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
#: Quota metrics that are project-wide rather than regional.
GLOBAL_QUOTAS = ("GPUS_ALL_REGIONS", "GPUS_PER_GPU_FAMILY")


def error_codes(exc: BaseException) -> list[str]:
    """Error codes/reasons carried by a google.api_core error (API or operation errors)."""
    codes: list[str] = []
    reason = getattr(exc, "reason", None)
    if reason:
        codes.append(str(reason))
    for err in getattr(exc, "errors", None) or ():
        if isinstance(err, Mapping):
            code = err.get("reason") or err.get("code")
        else:
            code = getattr(err, "code", None) or getattr(err, "reason", None)
        if code:
            codes.append(str(code))
    return codes


def _message(exc: BaseException) -> str:
    msgs = [str(getattr(exc, "message", "") or exc)]
    for err in getattr(exc, "errors", None) or ():
        msg = err.get("message") if isinstance(err, Mapping) else getattr(err, "message", "")
        if msg:
            msgs.append(str(msg))
    return " | ".join(m for m in msgs if m)


def _not_json(exc: gexc.GoogleAPICallError) -> bool:
    """Whether the HTTP answer behind exc carried a body that is not JSON (an HTML page)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, requests.Response) or not response.content:
        return False
    return "json" not in response.headers.get("Content-Type", "").lower()


def map_error(exc: BaseException, *, zone: str = "", what: str = "") -> NavarchError:
    """Translate a google-cloud-compute / google-auth / transport error into navarch's tree.

    Every SDK call of this module runs inside gcp_errors, which calls this.
    zone: the zone of the call (capacity and regional quota scopes are derived from it).
    Mapping (GCE API error reasons and operation error codes):
      ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS], STOCKOUT, insufficientCapacity,
        resourcePoolExhausted                        -> CapacityError(scope="zone")
      QUOTA_EXCEEDED / quotaExceeded                 -> QuotaError(scope="region"), or
        scope="provider" for GPUS_ALL_REGIONS / GPUS_PER_GPU_FAMILY / "globally"
      403 rateLimitExceeded, 429, 5xx, connection errors, timeouts
                                                     -> TransientError
      401, other 403, google.auth errors             -> AuthError
      400/404 of a call about a zone naming a machine or accelerator type
        (PLACEMENT_WORDS), or the zone itself           -> PlacementError(scope="zone")
      other 404 (image, network), 400                -> ConfigError (fix fleet.yaml)
      RetryError                                     -> mapping of its last cause
      an answer that is not JSON (protobuf ParseError, JSONDecodeError: an outage or
        proxy page where JSON was due)               -> TransientError
      anything else                                  -> ProviderError
    Every message is one line; an answer body (an HTML page) is quoted as an excerpt.
    """
    where = f" in {zone}" if zone else ""
    prefix = f"GCP {what}{where}: " if what else f"GCP{where}: "
    if isinstance(exc, gexc.RetryError) and exc.cause is not None:
        return map_error(exc.cause, zone=zone, what=what)
    if isinstance(exc, auth_exc.GoogleAuthError):
        return AuthError(
            prefix + f"credentials unusable: {exc}", code=type(exc).__name__, scope="provider"
        )
    if isinstance(exc, requests.ConnectionError | requests.Timeout | TimeoutError):
        return TransientError(prefix + f"connection failed: {exc}", code=type(exc).__name__)
    if isinstance(exc, ParseError | json.JSONDecodeError):
        return TransientError(
            prefix + "Compute Engine answered with a body that is not its JSON (an outage or "
            f"proxy page?): {answer_excerpt(exc)}",
            code=type(exc).__name__,
        )
    if not isinstance(exc, gexc.GoogleAPICallError):
        return ProviderError(
            prefix + f"{type(exc).__name__}: {answer_excerpt(exc, 300)}", code=type(exc).__name__
        )
    codes = error_codes(exc)
    message = answer_excerpt(_message(exc), 300)
    if _not_json(exc):
        message = (
            f"Compute Engine answered HTTP {exc.code} with a body that is not its JSON (an "
            f"outage or proxy page?): {answer_excerpt(exc.response.text)}"
        )
    code = codes[0] if codes else str(exc.code or "")
    capacity = next((c for c in codes if c in CAPACITY_CODES), None)
    if capacity is not None:
        return CapacityError(prefix + message, code=capacity, scope="zone")
    quota = next((c for c in codes if c in QUOTA_CODES), None)
    if quota is not None:
        globally = any(q in message for q in GLOBAL_QUOTAS) or "globally" in message
        return QuotaError(prefix + message, code=quota, scope="provider" if globally else "region")
    if any(c in RATE_REASONS for c in codes) or isinstance(
        exc, gexc.TooManyRequests | gexc.ServerError | gexc.DeadlineExceeded
    ):
        return TransientError(prefix + message, code=code)
    if isinstance(exc, gexc.Unauthorized | gexc.Forbidden):
        return AuthError(
            prefix + message + " (see docs/gcp.md for the IAM roles navarch needs)",
            code=code,
            scope="provider",
        )
    if (
        isinstance(exc, gexc.NotFound | gexc.BadRequest)
        and zone
        and (any(w in message.lower() for w in PLACEMENT_WORDS) or f"zones/{zone}'" in message)
    ):
        return PlacementError(prefix + message, code=code, scope="zone")
    if isinstance(exc, gexc.NotFound | gexc.BadRequest):
        return ConfigError(
            prefix + message,
            hint="check the pool's instance_types, zones and gcp: settings (image, network, "
            "accelerators) and the provider's project",
        )
    return ProviderError(prefix + message, code=code)


def gcp_errors(*, zone: str = "", what: str = "") -> AbstractContextManager[None]:
    """The one boundary every Compute Engine call goes through: any exception the SDK,
    google-auth or the HTTP transport raises leaves as map_error(exc, zone, what)."""
    return map_exceptions(lambda exc: map_error(exc, zone=zone, what=what))


def transient(exc: BaseException) -> bool:
    """Retry predicate: 429/5xx/connection errors, never a capacity or quota code."""
    if isinstance(exc, requests.ConnectionError | requests.Timeout):
        return True
    if not isinstance(exc, gexc.TooManyRequests | gexc.ServerError):
        return False
    return not any(c in CAPACITY_CODES or c in QUOTA_CODES for c in error_codes(exc))
