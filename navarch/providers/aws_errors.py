"""EC2's errors in navarch's words: the one boundary every EC2 call goes through.

`aws_errors` is the context manager around each SDK call; `map_error` translates a
botocore exception into navarch's provider errors (capacity, placement, quota, auth,
transient), by the EC2 API error code tables below. Sources: EC2 API reference "Error
codes" and botocore.exceptions; tests/contracts/error_tables.py lists the codes relied on.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    LaunchSpent,
    NavarchError,
    PlacementError,
    ProviderError,
    QuotaError,
    TransientError,
    map_exceptions,
)
from navarch.providers.optional import answer_excerpt

__all__ = [
    "AUTH_CODES",
    "CAPACITY_CODES",
    "LAUNCH_SPENT_CODES",
    "PLACEMENT_CODES",
    "QUOTA_CODES",
    "TRANSIENT_CODES",
    "aws_errors",
    "error_code",
    "map_error",
]

#: EC2 API error codes meaning "no capacity in this place now": fall over to the next zone
#: or instance type. Source: EC2 API reference, "Error codes" (InsufficientInstanceCapacity,
#: InsufficientHostCapacity, InsufficientFreeAddressesInSubnet = the zone's subnet is full)
#: and the Spot status codes (capacity-not-available, SpotMaxPriceTooLow: no spot capacity
#: at the pool's price).
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientFreeAddressesInSubnet",
        "capacity-not-available",
        "SpotMaxPriceTooLow",
    }
)
#: "This place cannot take this launch": fall over, remembered with a backoff, saying why
#: Source: EC2 API reference, "Error codes": Unsupported = "the instance
#: type is not supported in the requested Availability Zone". InvalidParameterValue is a
#: placement error only when its message is about the Availability Zone or the instance
#: type (PLACEMENT_MESSAGE_WORDS); about anything else it is a plain ProviderError.
PLACEMENT_CODES = frozenset({"Unsupported"})
PLACEMENT_IF_ABOUT_PLACE = frozenset({"InvalidParameterValue"})
PLACEMENT_MESSAGE_WORDS = ("availability zone", "instancetype", "instance type")
#: The ClientToken already launched an instance that has since terminated: that token can
#: never launch again (EC2 API reference "Error codes": IdempotentInstanceTerminated).
LAUNCH_SPENT_CODES = frozenset({"IdempotentInstanceTerminated"})
#: Account limits (EC2 API error codes); scope "region": quotas are per region.
QUOTA_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "InsufficientReservedInstancesCapacity",
    }
)
#: Credentials and permissions (EC2 API common error codes, STS token expiry).
AUTH_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AuthFailure",
        "ExpiredToken",
        "RequestExpired",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "OptInRequired",
        "Blocked",
        "AccessDenied",
    }
)
#: Throttling and server-side failures (EC2 API common error codes); retry next run.
TRANSIENT_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
    }
)


def error_code(exc: ClientError) -> str:
    """The EC2 error code of a ClientError ("" when the answer named none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def map_error(exc: BaseException, *, zone: str = "", what: str = "") -> NavarchError:
    """Translate a botocore exception into navarch's provider errors.

    zone: the place the call was about (CapacityError scope "zone" names it); what: the
    action, for the message. Codes: CAPACITY_CODES -> CapacityError(scope="zone"),
    PLACEMENT_CODES (and InvalidParameterValue about the zone or type) ->
    PlacementError(scope="zone"), LAUNCH_SPENT_CODES -> LaunchSpent, QUOTA_CODES -> QuotaError(scope="region"), AUTH_CODES and missing credentials ->
    AuthError, TRANSIENT_CODES, HTTP 5xx, connection errors and timeouts -> TransientError,
    a missing region or profile -> ConfigError; anything else -> ProviderError with the code.
    Source: EC2 API reference "Error codes" and botocore.exceptions.
    """
    prefix = f"{what}: " if what else ""
    where = f" in {zone}" if zone else ""
    if isinstance(exc, ResponseParserError):
        # An outage or proxy page (HTML) where EC2's XML was due: the next run may read it.
        return TransientError(
            f"{prefix}EC2{where} answered with a body that is not EC2's XML (an outage or "
            f"proxy page?): {answer_excerpt(exc)}",
            code="ResponseParserError",
        )
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = answer_excerpt(exc.response.get("Error", {}).get("Message", "") or exc, 300)
        text = f"{prefix}{code}{where}: {message}"
        if code in CAPACITY_CODES:
            return CapacityError(text, code=code, scope="zone")
        if code in PLACEMENT_CODES or (
            code in PLACEMENT_IF_ABOUT_PLACE
            and any(w in message.lower() for w in PLACEMENT_MESSAGE_WORDS)
        ):
            return PlacementError(text, code=code, scope="zone")
        if code in LAUNCH_SPENT_CODES:
            return LaunchSpent(text, code=code)
        if code in QUOTA_CODES:
            return QuotaError(text, code=code, scope="region")
        if code in AUTH_CODES:
            return AuthError(text, code=code)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in TRANSIENT_CODES or status >= 500:
            return TransientError(text, code=code)
        return ProviderError(text, code=code)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AuthError(f"{prefix}no usable AWS credentials: {exc}", code=type(exc).__name__)
    if isinstance(exc, NoRegionError):
        return ConfigError(f"{prefix}no AWS region: {exc}", hint="set region on the provider")
    if isinstance(exc, ProfileNotFound):
        return ConfigError(f"{prefix}{exc}", hint="fix the provider's profile or ~/.aws/config")
    if isinstance(
        exc,
        EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError,
    ):
        return TransientError(f"{prefix}{exc}", code=type(exc).__name__)
    if isinstance(exc, BotoCoreError):
        return ProviderError(f"{prefix}{answer_excerpt(exc, 300)}", code=type(exc).__name__)
    return ProviderError(f"{prefix}{answer_excerpt(repr(exc), 300)}", code=type(exc).__name__)


def aws_errors(*, zone: str = "", what: str = "") -> AbstractContextManager[None]:
    """The one boundary every EC2 call goes through: botocore exceptions -> map_error.

    Use as `with aws_errors(what="RunInstances", zone=zone): client.run_instances(...)`;
    any botocore exception raised inside (ClientError, EndpointConnectionError, timeouts,
    credential errors) leaves as navarch's error, raised from the original.
    """

    def translate(exc: Exception) -> NavarchError | None:
        if isinstance(exc, BotoCoreError | ClientError | ResponseParserError):
            return map_error(exc, zone=zone, what=what)
        return None

    return map_exceptions(translate)
