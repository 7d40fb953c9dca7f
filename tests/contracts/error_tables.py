"""Every upstream error each provider relies on, and the navarch error it must become.

One table per provider, read by the provider contract (its `map_error` over the table).
A row: the SDK's exception, the navarch error type, and the scope the error must carry
(None: not checked). Sources: EC2 API reference "Error codes"; Compute Engine API errors
and operation error codes; Lambda Cloud API v1.10 error codes; Azure VM docs
"Troubleshoot allocation failures", "Resolve errors for resource quotas".
"""

from __future__ import annotations

import json

import requests
from azure.core.exceptions import (
    ClientAuthenticationError,
    DecodeError,
    DeserializationError,
    ServiceRequestError,
)
from botocore import exceptions as boto_exc
from botocore.parsers import ResponseParserError
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.protobuf.json_format import ParseError

from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    LaunchSpent,
    PlacementError,
    ProviderError,
    QuotaError,
    TransientError,
)
from navarch.providers.azure import ERROR_CODES as AZURE_CODES
from navarch.providers.lambda_cloud import LambdaApiError
from tests.support.fake_arm import arm_error
from tests.support.moto_server import client_error
from tests.support.providers import ErrorCase

# -- AWS (botocore) ------------------------------------------------------------------------


# Every EC2 error code navarch maps by name, and the error it must become.
AWS_RELIED_ON = {
    "InsufficientInstanceCapacity": CapacityError,
    "InsufficientHostCapacity": CapacityError,
    "InsufficientCapacity": CapacityError,
    "InsufficientFreeAddressesInSubnet": CapacityError,
    "Unsupported": PlacementError,
    "IdempotentInstanceTerminated": LaunchSpent,
    "capacity-not-available": CapacityError,
    "SpotMaxPriceTooLow": CapacityError,
    "VcpuLimitExceeded": QuotaError,
    "InstanceLimitExceeded": QuotaError,
    "MaxSpotInstanceCountExceeded": QuotaError,
    "InsufficientReservedInstancesCapacity": QuotaError,
    "UnauthorizedOperation": AuthError,
    "AuthFailure": AuthError,
    "ExpiredToken": AuthError,
    "RequestExpired": AuthError,
    "InvalidClientTokenId": AuthError,
    "SignatureDoesNotMatch": AuthError,
    "OptInRequired": AuthError,
    "Blocked": AuthError,
    "AccessDenied": AuthError,
    "RequestLimitExceeded": TransientError,
    "Throttling": TransientError,
    "ThrottlingException": TransientError,
    "InternalError": TransientError,
    "InternalFailure": TransientError,
    "ServiceUnavailable": TransientError,
    "Unavailable": TransientError,
}

AWS_ERRORS = [
    *(ErrorCase(client_error(code), expected) for code, expected in AWS_RELIED_ON.items()),
    ErrorCase(client_error("InsufficientInstanceCapacity", 500), CapacityError, "zone"),
    ErrorCase(client_error("VcpuLimitExceeded"), QuotaError, "region"),
    # Unknown 5xx is transient; unknown 4xx stays a plain ProviderError.
    ErrorCase(client_error("SomethingNew", 503), TransientError),
    ErrorCase(client_error("InvalidAMIID.Malformed"), ProviderError),
    ErrorCase(boto_exc.NoCredentialsError(), AuthError),
    ErrorCase(boto_exc.EndpointConnectionError(endpoint_url="http://x"), TransientError),
    ErrorCase(boto_exc.ConnectTimeoutError(endpoint_url="http://x"), TransientError),
    ErrorCase(boto_exc.ReadTimeoutError(endpoint_url="http://x"), TransientError),
    # An outage or proxy page where EC2's XML was due (botocore's own message shape).
    ErrorCase(
        ResponseParserError(
            "Unable to parse response (syntax error: line 1, column 0), invalid XML "
            "received. Further retries may succeed:\nb'<!DOCTYPE html>\n<html>...'"
        ),
        TransientError,
    ),
]


# -- GCP (google-cloud-compute, google-auth) ----------------------------------------------


def _op_error(code: str, status: int, message: str = "m") -> gexc.GoogleAPICallError:
    from google.cloud import compute_v1

    return gexc.from_http_status(
        status, "op", errors=[compute_v1.Errors(code=code, message=message)]
    )


def _api_error(cls: type, reason: str, message: str = "m") -> gexc.GoogleAPICallError:
    return cls(message, errors=[{"reason": reason, "message": message, "domain": "global"}])


_REGIONAL_QUOTA = "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1."
_GLOBAL_QUOTA = "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally."


def gcp_errors() -> list[ErrorCase]:
    """The GCP table, built when a test asks for it: its operation errors are
    google-cloud-compute's own messages, an import of about two seconds that a process
    collecting the tests should not pay."""
    return [
        ErrorCase(_op_error("ZONE_RESOURCE_POOL_EXHAUSTED", 503), CapacityError, "zone"),
        ErrorCase(
            _op_error("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", 503), CapacityError, "zone"
        ),
        ErrorCase(_op_error("STOCKOUT", 503), CapacityError, "zone"),
        ErrorCase(
            _api_error(gexc.ServiceUnavailable, "insufficientCapacity"), CapacityError, "zone"
        ),
        ErrorCase(
            _api_error(gexc.ServiceUnavailable, "resourcePoolExhausted"), CapacityError, "zone"
        ),
        ErrorCase(_op_error("QUOTA_EXCEEDED", 403, _REGIONAL_QUOTA), QuotaError, "region"),
        ErrorCase(_op_error("QUOTA_EXCEEDED", 403, _GLOBAL_QUOTA), QuotaError, "provider"),
        ErrorCase(_api_error(gexc.Forbidden, "quotaExceeded"), QuotaError, "region"),
        ErrorCase(_api_error(gexc.Forbidden, "rateLimitExceeded"), TransientError, ""),
        ErrorCase(_api_error(gexc.Forbidden, "userRateLimitExceeded"), TransientError, ""),
        ErrorCase(_api_error(gexc.TooManyRequests, "rateLimitExceeded"), TransientError, ""),
        ErrorCase(_api_error(gexc.InternalServerError, "backendError"), TransientError, ""),
        ErrorCase(_api_error(gexc.ServiceUnavailable, "backendError"), TransientError, ""),
        ErrorCase(_api_error(gexc.GatewayTimeout, "timeout"), TransientError, ""),
        ErrorCase(
            gexc.RetryError("deadline", _api_error(gexc.ServiceUnavailable, "backendError")),
            TransientError,
            "",
        ),
        ErrorCase(requests.ConnectionError("refused"), TransientError, ""),
        ErrorCase(_api_error(gexc.Forbidden, "forbidden"), AuthError, "provider"),
        ErrorCase(_api_error(gexc.Unauthorized, "authError"), AuthError, "provider"),
        ErrorCase(auth_exc.DefaultCredentialsError("no ADC"), AuthError, "provider"),
        ErrorCase(auth_exc.RefreshError("expired"), AuthError, "provider"),
        ErrorCase(_api_error(gexc.NotFound, "notFound"), ConfigError),
        ErrorCase(_api_error(gexc.BadRequest, "invalid"), ConfigError),
        # A machine or accelerator type not offered in the zone, or the zone itself: the
        # place is wrong, not the pool.
        ErrorCase(
            _api_error(
                gexc.BadRequest,
                "invalid",
                "Invalid value for field 'resource.machineType': "
                "'zones/us-central1-a/machineTypes/a3-highgpu-8g'. Machine type with name "
                "'a3-highgpu-8g' does not exist in zone 'us-central1-a'.",
            ),
            PlacementError,
            "zone",
        ),
        ErrorCase(
            _api_error(
                gexc.NotFound,
                "notFound",
                "The resource 'projects/p/zones/us-central1-a/acceleratorTypes/nvidia-h100-80gb' "
                "was not found",
            ),
            PlacementError,
            "zone",
        ),
        ErrorCase(
            _api_error(
                gexc.NotFound,
                "notFound",
                "The resource 'projects/p/zones/us-central1-a' was not found",
            ),
            PlacementError,
            "zone",
        ),
        ErrorCase(
            _api_error(
                gexc.NotFound, "notFound", "The resource 'projects/p/global/images/x' was not found"
            ),
            ConfigError,
        ),
        ErrorCase(_api_error(gexc.Conflict, "resourceNotReady"), ProviderError, ""),
        # A 2xx answer that is not JSON: the REST transport's protobuf parse fails.
        ErrorCase(ParseError("Failed to load JSON: Expecting value"), TransientError, ""),
    ]


# -- Lambda Cloud (its REST API over requests) ------------------------------------------

LAMBDA_ERRORS = [
    ErrorCase(
        LambdaApiError(400, "instance-operations/launch/insufficient-capacity", "m"),
        CapacityError,
        "zone",
    ),
    ErrorCase(LambdaApiError(400, "global/quota-exceeded", "m"), QuotaError),
    ErrorCase(LambdaApiError(401, "global/invalid-api-key", "m"), AuthError),
    ErrorCase(LambdaApiError(403, "global/account-inactive", "m"), AuthError),
    ErrorCase(LambdaApiError(403, "global/invalid-address", "m"), AuthError),
    ErrorCase(LambdaApiError(429, "", "too many"), TransientError),
    ErrorCase(LambdaApiError(500, "", "m"), TransientError),
    ErrorCase(LambdaApiError(502, "provider/internal-unavailable", "m"), TransientError),
    ErrorCase(LambdaApiError(400, "global/invalid-parameters", "m"), ConfigError),
    ErrorCase(LambdaApiError(404, "global/object-does-not-exist", "m"), ConfigError),
    ErrorCase(
        LambdaApiError(400, "instance-operations/launch/file-system-in-wrong-region", "m"),
        ConfigError,
    ),
    ErrorCase(LambdaApiError(409, "global/conflict", "m"), ProviderError),
    ErrorCase(
        LambdaApiError(400, "global/invalid-parameters", "Invalid region: us-nowhere-1"),
        PlacementError,
    ),
    ErrorCase(
        LambdaApiError(
            400,
            "global/invalid-parameters",
            "instance type gpu_8x_h100_sxm5 is not available in region us-west-3",
        ),
        PlacementError,
    ),
    ErrorCase(requests.ConnectionError("refused"), TransientError),
    ErrorCase(requests.Timeout("slow"), TransientError),
    ErrorCase(requests.exceptions.RetryError("exhausted"), TransientError),
    # A 2xx answer that is not a JSON object (LambdaProvider._call raises ValueError).
    ErrorCase(ValueError("HTTP 200 (text/html): <!DOCTYPE html>"), TransientError),
]


# -- Azure (azure-core over ARM) -------------------------------------------------------

#: Every ARM code navarch maps by name (navarch.providers.azure.ERROR_CODES, read here so
#: a code added there is checked at once), then the shapes mapped by HTTP status or type.
_QUOTA_MESSAGE = "Operation could not be completed as it results in exceeding approved quota"
AZURE_ERRORS = [
    *(
        ErrorCase(
            arm_error(409, code, _QUOTA_MESSAGE if code == "OperationNotAllowed" else "m"),
            kind,
            "zone" if kind in (CapacityError, QuotaError) else None,
        )
        for code, kind in sorted(AZURE_CODES.items())
    ),
    ErrorCase(
        arm_error(409, "OperationNotAllowed", "not allowed on a deallocated VM"), ProviderError
    ),
    ErrorCase(arm_error(403, "SomethingElse"), AuthError),
    ErrorCase(arm_error(503, "SomethingElse"), TransientError),
    ErrorCase(arm_error(400, "InvalidParameter"), ProviderError),
    ErrorCase(ClientAuthenticationError("no credential"), AuthError),
    ErrorCase(ServiceRequestError("connection refused"), TransientError),
    # A 2xx answer that is not JSON: azure-core's DecodeError, the SDK's
    # DeserializationError, or json's own error from the generated client.
    ErrorCase(DecodeError("JSON is invalid: Expecting value"), TransientError),
    ErrorCase(DeserializationError("Cannot deserialize content"), TransientError),
    ErrorCase(json.JSONDecodeError("Expecting value", "<!DOCTYPE html>", 0), TransientError),
]
