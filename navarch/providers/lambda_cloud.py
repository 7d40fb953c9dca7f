"""Lambda Cloud provider over its REST API (Lambda Cloud API v1.10, https://docs.lambda.ai/api/cloud).

Pools name Lambda *regions* (us-east-1, us-west-1, ...) in their `zones` list: Lambda has
no zones, and a region is the unit of capacity.

The launch endpoint has no idempotency token, so:
- before every launch the provider lists instances and returns the node's instance if
  one with that name already exists (a run killed after launching finds it there);
- a launch is never retried: the requests Session retries GETs only (urllib3 Retry
  adapter: 429/5xx/connection errors, honouring Retry-After). A launch whose response
  is lost is a TransientError, and the next run's list shows whether it happened.
- launches are spaced by `launch_interval_s` (default 12 s: the API's launch rate limit
  of 1 request per 12 s); the last launch time lives in the provider object, and the
  clock and sleep are injectable so tests never wait.

Capacity is checked first through GET /instance-types `regions_with_capacity_available`,
so an empty region costs no launch. Every HTTP/SDK error is translated in `map_error`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from navarch.capabilities import Capability
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
from navarch.inventory import (
    NO_CLOUD_STATUS,
    TAG_FLEET,
    CloudStatus,
    Instance,
    InstanceHealth,
    InstanceState,
)
from navarch.providers.base import ProvisionRequest, ensure_no_ownership_tags, ensure_owned
from navarch.providers.optional import answer_excerpt

__all__ = ["LambdaApiError", "LambdaProvider", "LambdaSettings", "create", "map_error"]

DEFAULT_API_BASE = "https://cloud.lambda.ai/api/v1"
#: Lambda Cloud API v1.10: instance-operations/launch is limited to 1 request per 12 s.
LAUNCH_INTERVAL_S = 12.0
#: Tag holding the launch time (RFC 3339 UTC): the v1.10 Instance object carries none.
TAG_LAUNCHED_AT = "navarch-launched-at"

_STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.RUNNING,
}
#: Lambda's own health verdict by Instance.status (Lambda Cloud API v1.10).
_CLOUD_STATUS = {
    "active": CloudStatus(InstanceHealth.OK),
    "unhealthy": CloudStatus(InstanceHealth.IMPAIRED, "Lambda reports the instance unhealthy"),
}
#: Statuses of instances that are gone or going; never listed (they hold no capacity).
GONE = frozenset({"terminating", "terminated", "preempted"})

_TAG_KEY = re.compile(r"^[a-z][a-z0-9-:]+$")

CAPACITY_CODES = frozenset({"instance-operations/launch/insufficient-capacity"})
QUOTA_CODES = frozenset({"global/quota-exceeded"})
AUTH_CODES = frozenset(
    {"global/invalid-api-key", "global/account-inactive", "global/invalid-address"}
)
#: A 400/404 about the place: the type is not offered in the region, or
#: the region is unknown. The next place (region, type) may take it: fall over. Source:
#: Lambda Cloud API v1.10 launch errors ("Invalid region", "instance type ... not
#: available in region").
PLACEMENT_WORDS = ("region", "instance type", "instance_type")
CONFIG_CODES = frozenset(
    {
        "global/invalid-parameters",
        "global/object-does-not-exist",
        "instance-operations/launch/file-system-in-wrong-region",
    }
)


def _json_object(resp: requests.Response) -> dict[str, Any]:
    """The answer's JSON object. Raises ValueError naming the status, the content type and
    an excerpt of the body when it is not one (an HTML outage or proxy page)."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        kind = resp.headers.get("Content-Type", "no content type")
        raise ValueError(f"HTTP {resp.status_code} ({kind}): {answer_excerpt(resp.text)}")
    return body


class LambdaApiError(Exception):
    """A non-2xx answer from the Lambda Cloud API: status, code ("global/..."), message."""

    def __init__(self, status: int, code: str, message: str, suggestion: str = "") -> None:
        self.status = status
        self.code = code
        self.message = message
        self.suggestion = suggestion
        super().__init__(f"HTTP {status} {code}: {message}")


def map_error(exc: BaseException, *, region: str = "", what: str = "") -> NavarchError:
    """Translate a Lambda API / requests error into navarch's tree (this module's one boundary).

    Mapping (Lambda Cloud API v1.10 error codes; branch on `code`, never on message):
      instance-operations/launch/insufficient-capacity -> CapacityError(scope="zone": the region)
      global/quota-exceeded                              -> QuotaError(scope="provider")
      global/invalid-api-key, global/account-inactive,
        global/invalid-address, HTTP 401/403             -> AuthError
      HTTP 429, 5xx, provider/* codes, connection errors,
        timeouts, exhausted GET retries, an answer that
        is not a JSON object (ValueError: an outage or
        proxy page)                                      -> TransientError
      400/404 of a launch (region given) whose message is about the region or the
        instance type (PLACEMENT_WORDS)                  -> PlacementError(scope="zone")
      global/invalid-parameters, global/object-does-not-exist,
        .../file-system-in-wrong-region                  -> ConfigError (fix fleet.yaml)
      anything else                                      -> ProviderError
    Every API call of this module runs inside lambda_errors, which calls this.
    """
    where = f" in {region}" if region else ""
    prefix = f"Lambda {what}{where}: " if what else f"Lambda{where}: "
    if isinstance(
        exc, requests.exceptions.RetryError | requests.ConnectionError | requests.Timeout
    ):
        return TransientError(
            prefix + f"{type(exc).__name__}: {answer_excerpt(exc, 300)}", code=type(exc).__name__
        )
    if isinstance(exc, ValueError):
        return TransientError(
            prefix + "the API answered with a body that is not its JSON (an outage or proxy "
            f"page?): {answer_excerpt(exc)}",
            code="not-json",
        )
    if not isinstance(exc, LambdaApiError):
        return ProviderError(
            prefix + f"{type(exc).__name__}: {answer_excerpt(exc, 300)}", code=type(exc).__name__
        )
    text = prefix + answer_excerpt(
        exc.message + (f" ({exc.suggestion})" if exc.suggestion else ""), 300
    )
    if exc.code in CAPACITY_CODES:
        return CapacityError(text, code=exc.code, scope="zone")
    if exc.code in QUOTA_CODES:
        return QuotaError(text, code=exc.code, scope="provider")
    if exc.code in AUTH_CODES or exc.status in (401, 403):
        return AuthError(text, code=exc.code, scope="provider")
    if exc.status == 429 or exc.status >= 500 or exc.code.startswith("provider/"):
        return TransientError(text, code=exc.code or str(exc.status))
    if (
        (exc.code in CONFIG_CODES or exc.status in (400, 404))
        and region
        and any(w in exc.message.lower() for w in PLACEMENT_WORDS)
        and "file-system" not in exc.code
    ):
        return PlacementError(text, code=exc.code or str(exc.status), scope="zone")
    if exc.code in CONFIG_CODES or exc.status in (400, 404):
        return ConfigError(
            text,
            hint="check the pool's instance_types, zones (Lambda region names), lambda: settings "
            "and the provider's ssh_key_name",
        )
    return ProviderError(text, code=exc.code or str(exc.status))


def lambda_errors(*, region: str = "", what: str = "") -> AbstractContextManager[None]:
    """The one boundary every Lambda Cloud API call goes through: API errors, requests'
    exceptions and unreadable JSON leave as map_error(exc, region, what)."""

    def translate(exc: Exception) -> NavarchError | None:
        if isinstance(exc, LambdaApiError | requests.RequestException | ValueError):
            return map_error(exc, region=region, what=what)
        return None

    return map_exceptions(translate)


@dataclass(frozen=True)
class LambdaSettings:
    """The provider's keys from fleet.yaml (schemas/providers/lambda.schema.json#/$defs/provider)."""

    api_key_env: str
    ssh_key_name: str
    api_base: str = DEFAULT_API_BASE
    launch_interval_s: float = LAUNCH_INTERVAL_S
    timeout_s: float = 30.0

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> LambdaSettings:
        return cls(
            api_key_env=str(config["api_key_env"]),
            ssh_key_name=str(config.get("ssh_key_name", "")),
            api_base=str(config.get("api_base", DEFAULT_API_BASE)).rstrip("/"),
            launch_interval_s=float(config.get("launch_interval_s", LAUNCH_INTERVAL_S)),
            timeout_s=float(config.get("timeout_s", 30.0)),
        )


def launch_body(
    request: ProvisionRequest, ssh_key_name: str, launched_at: datetime
) -> dict[str, Any]:
    """Build the POST /instance-operations/launch body for one node (pure; no I/O).

    Shapes (Lambda Cloud API v1.10): region_name, instance_type_name, ssh_key_names (exactly
    one), name (<= 64 chars) = node name, user_data (cloud-init, <= 1 MB), tags [{key,
    value}] = request.tags plus navarch-launched-at; options from the pool's `lambda:`
    mapping: image {"family"|"id"}, file_system_names, firewall_ruleset_ids.
    Raises ConfigError for tags Lambda would reject (key ^[a-z][a-z0-9-:]+$ <= 55 chars,
    value <= 128 chars) or a name over 64 characters.
    """
    tags = {**dict(request.tags), TAG_LAUNCHED_AT: _rfc3339(launched_at)}
    for key, value in tags.items():
        if not _TAG_KEY.match(key) or len(key) > 55 or len(value) > 128:
            raise ConfigError(
                f"tag {key}={value!r} is not a valid Lambda tag (key ^[a-z][a-z0-9-:]+$ "
                "at most 55 characters, value at most 128)",
                key_path=f"pools.{request.pool}.labels",
            )
    if len(request.node) > 64:
        raise ConfigError(f"node name {request.node!r} is longer than Lambda's 64 characters")
    body: dict[str, Any] = {
        "region_name": request.zone,
        "instance_type_name": request.instance_type,
        "ssh_key_names": [ssh_key_name],
        "name": request.node,
        "tags": [{"key": k, "value": v} for k, v in sorted(tags.items())],
    }
    if request.user_data:
        body["user_data"] = request.user_data
    opts = request.options
    image = opts.get("image")
    if isinstance(image, Mapping) and image:
        body["image"] = dict(image)
    if opts.get("file_system_names"):
        body["file_system_names"] = list(opts["file_system_names"])  # type: ignore[call-overload]
    if opts.get("firewall_ruleset_ids"):
        body["firewall_rulesets"] = [{"id": i} for i in opts["firewall_ruleset_ids"]]  # type: ignore[attr-defined]
    return body


def to_instance(provider: str, data: Mapping[str, Any]) -> Instance | None:
    """Convert a Lambda Instance object; None for terminating/terminated/preempted ones.

    Status mapping (Lambda Cloud API v1.10 Instance.status): booting -> pending,
    active/unhealthy -> running; Lambda's own view is the cloud_status: unhealthy is
    impaired, active ok, booting unknown (the planner acts on an impairment seen on
    consecutive runs; the agent's report judges the GPUs). zone = region name; instance_id = Lambda's id; launched_at from the
    navarch-launched-at tag (epoch when absent). Lambda has no spot capacity.
    """
    state = _STATES.get(str(data.get("status", "")))
    if state is None:
        return None
    tags = {str(t["key"]): str(t.get("value", "")) for t in data.get("tags") or () if "key" in t}
    launched = datetime.fromtimestamp(0, UTC)
    if TAG_LAUNCHED_AT in tags:
        try:
            launched = datetime.fromisoformat(tags[TAG_LAUNCHED_AT].replace("Z", "+00:00"))
        except ValueError:
            pass
    return Instance(
        provider=provider,
        instance_id=str(data["id"]),
        zone=str((data.get("region") or {}).get("name", "")),
        instance_type=str((data.get("instance_type") or {}).get("name", "")),
        state=state,
        launched_at=launched.astimezone(UTC),
        tags=tuple(sorted(tags.items())),
        spot=False,
        address=data.get("ip") or data.get("private_ip") or None,
        cloud_status=_CLOUD_STATUS.get(str(data.get("status", "")), NO_CLOUD_STATUS),
    )


class LambdaProvider:
    """navarch Provider on one Lambda Cloud account (see the module docstring)."""

    #: What this provider can do (instance restart and status; tags are fixed at launch and no maintenance notice is listed).
    capabilities: ClassVar[Capability] = Capability.REBOOT | Capability.INSTANCE_STATUS

    def __init__(
        self,
        name: str,
        settings: LambdaSettings,
        *,
        fleet: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        session: requests.Session | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.fleet = fleet
        self._clock = clock
        self._sleep = sleep
        self._now = now
        self._last_launch: float | None = None
        self._session = session if session is not None else self._make_session()

    def _make_session(self) -> requests.Session:
        session = requests.Session()
        retry = Retry(
            total=3,
            backoff_factor=1.0,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=frozenset({"GET"}),  # never POST: launch has no idempotency token
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        session.mount(self.settings.api_base + "/", HTTPAdapter(max_retries=retry))
        return session

    def _api_key(self) -> str:
        key = os.environ.get(self.settings.api_key_env, "")
        if not key:
            raise AuthError(
                f"Lambda API key missing: environment variable {self.settings.api_key_env} is "
                "not set (create a key at https://cloud.lambda.ai/api-keys)",
                code="missing-api-key",
                scope="provider",
            )
        return key

    def _call(
        self, method: str, path: str, *, json: Any = None, what: str = "", region: str = ""
    ) -> Any:
        """One API call; returns the response's `data`. Raises the mapped error."""
        headers = {"Authorization": f"Bearer {self._api_key()}", "Accept": "application/json"}
        with lambda_errors(region=region, what=what or f"{method} {path}"):
            resp = self._session.request(
                method,
                self.settings.api_base + path,
                json=json,
                headers=headers,
                timeout=self.settings.timeout_s,
            )
            if resp.status_code >= 400:
                try:
                    err = _json_object(resp).get("error") or {}
                except ValueError as exc:
                    err = {
                        "message": f"{resp.reason}, answered with a body that is not JSON: {exc}"
                    }
                if not isinstance(err, dict):
                    err = {}
                raise LambdaApiError(
                    resp.status_code,
                    str(err.get("code", "")),
                    str(err.get("message", resp.reason)),
                    str(err.get("suggestion", "") or ""),
                )
            return _json_object(resp).get("data")

    # -- Provider contract ------------------------------------------------------------

    def _all_instances(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/instances", what="list instances") or [])

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        """Instances tagged navarch-fleet=<fleet> (GET /instances), sorted by (region, id).

        Terminating, terminated and preempted instances are not listed.
        Raises AuthError, TransientError.
        """
        out = []
        for data in self._all_instances():
            inst = to_instance(self.name, data)
            if inst is not None and inst.fleet == fleet:
                out.append(inst)
        return sorted(out, key=lambda i: (i.zone, i.instance_id))

    def provision(self, request: ProvisionRequest) -> Instance:
        """Launch one instance named request.node in region request.zone.

        Steps: list by name (return the node's live instance if it exists: the API has no
        idempotency token); check regions_with_capacity_available (GET /instance-types);
        wait out the launch interval; POST /instance-operations/launch once, never retried.
        Raises CapacityError(scope="zone") when the region has no capacity (also for a
        spot request: Lambda sells none), QuotaError, AuthError, TransientError (including
        a lost launch response), PlacementError (instance type unknown to Lambda, or not
        offered in the region), ConfigError (bad tags or options).
        """
        region = request.zone
        if request.spot:
            raise CapacityError(
                "Lambda Cloud has no spot capacity", code="no-spot-capacity", scope="zone"
            )
        for data in self._all_instances():
            if data.get("name") == request.node and data.get("status") not in GONE:
                found = to_instance(self.name, data)
                if found is None or found.fleet != request.fleet:
                    raise ProviderError(
                        f"Lambda instance name {request.node} is taken by an instance not "
                        f"tagged {TAG_FLEET}={request.fleet}",
                        code="name-taken",
                    )
                return found
        self._check_capacity(request.instance_type, region)
        body = launch_body(request, self._ssh_key_name(), self._now())
        self._wait_for_launch_slot()
        self._last_launch = self._clock()
        data = self._call(
            "POST", "/instance-operations/launch", json=body, what="launch", region=region
        )
        ids = list((data or {}).get("instance_ids") or [])
        if not ids:
            raise ProviderError("Lambda launch returned no instance id", code="no-instance-id")
        try:
            detail = self._call("GET", f"/instances/{ids[0]}", what="get", region=region)
            inst = to_instance(self.name, detail or {})
        except TransientError:
            inst = None
        if inst is not None:
            return inst
        return Instance(
            provider=self.name,
            instance_id=str(ids[0]),
            zone=region,
            instance_type=request.instance_type,
            state=InstanceState.PENDING,
            launched_at=datetime.fromisoformat(
                body_tag(body, TAG_LAUNCHED_AT).replace("Z", "+00:00")
            ),
            tags=tuple(sorted((t["key"], t["value"]) for t in body["tags"])),
        )

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Terminate instances by id (POST /instance-operations/terminate); gone = success.

        One batched call; if the API answers global/object-does-not-exist (some id is
        already gone), each id is terminated alone and a missing one counts as success.
        Refuses (ProviderError) an instance not tagged with this fleet (safety rule 1).
        Raises AuthError, TransientError.
        """
        ensure_owned(instances, self.fleet, "terminate")
        ids = [i.instance_id for i in instances]
        if not ids:
            return
        try:
            self._call("POST", "/instance-operations/terminate", json={"instance_ids": ids})
            return
        except ConfigError as exc:
            if getattr(exc.__cause__, "code", "") != "global/object-does-not-exist":
                raise
        for one in ids:
            try:
                self._call("POST", "/instance-operations/terminate", json={"instance_ids": [one]})
            except ConfigError as exc:
                if getattr(exc.__cause__, "code", "") != "global/object-does-not-exist":
                    raise

    def reboot(self, instances: Sequence[Instance]) -> None:
        """Restart instances by id, one batched POST /instance-operations/restart
        (Lambda Cloud API: the same instance reboots; it keeps its id, IP and disk).

        Refuses (ProviderError, before any call) an instance not tagged with this fleet
        (safety rule 1). Raises the mapped errors (an id already gone is ConfigError with
        code global/object-does-not-exist), AuthError, TransientError.
        """
        ensure_owned(instances, self.fleet, "restart")
        ids = sorted({i.instance_id for i in instances})
        if ids:
            self._call(
                "POST", "/instance-operations/restart", json={"instance_ids": ids}, what="restart"
            )

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        """Lambda Cloud sets an instance's tags only at launch: always ProviderError
        (code Unsupported), after the same ownership checks every provider makes."""
        ensure_owned([instance], self.fleet, "tag")
        ensure_no_ownership_tags(instance, tags)
        raise ProviderError(
            f"Lambda Cloud cannot update the tags of {instance.instance_id} in place",
            code="Unsupported",
        )

    # -- helpers ---------------------------------------------------------------------------

    def _ssh_key_name(self) -> str:
        if not self.settings.ssh_key_name:
            raise ConfigError(
                "Lambda launches need an SSH key name",
                key_path=f"providers.{self.name}.ssh_key_name",
            )
        return self.settings.ssh_key_name

    def _check_capacity(self, instance_type: str, region: str) -> None:
        types = self._call("GET", "/instance-types", what="instance types", region=region) or {}
        entry = types.get(instance_type)
        if entry is None:
            # Not offered at all: the place (type, region) is wrong, not the pool (the next
            # place may use another type). Remembered with a backoff, saying why.
            raise PlacementError(
                f"Lambda has no instance type {instance_type!r} (known types: "
                + ", ".join(sorted(types))
                + ")",
                code="unknown-instance-type",
                scope="zone",
            )
        regions = {r.get("name") for r in entry.get("regions_with_capacity_available") or ()}
        if region not in regions:
            raise CapacityError(
                f"Lambda lists no capacity for {instance_type} in {region}",
                code="instance-operations/launch/insufficient-capacity",
                scope="zone",
            )

    def _wait_for_launch_slot(self) -> None:
        """Sleep until launch_interval_s has passed since this provider's last launch."""
        if self._last_launch is None:
            return
        remaining = self._last_launch + self.settings.launch_interval_s - self._clock()
        if remaining > 0:
            self._sleep(remaining)


def body_tag(body: Mapping[str, Any], key: str) -> str:
    """The value of tag `key` in a launch body ("" when absent)."""
    for tag in body.get("tags", ()):
        if tag["key"] == key:
            return str(tag["value"])
    return ""


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def create(name: str, config: Mapping[str, Any], *, base_dir: Path, fleet: str) -> LambdaProvider:
    """Build the Lambda provider from its fleet.yaml mapping (schema-checked).

    The API key is read from the environment variable named by api_key_env at the first
    call (so `navarch validate` needs no key). Raises ConfigError when api_key_env is missing.
    """
    del base_dir
    if not config.get("api_key_env"):
        raise ConfigError(
            "lambda provider needs api_key_env", key_path=f"providers.{name}.api_key_env"
        )
    return LambdaProvider(name, LambdaSettings.from_mapping(config), fleet=fleet)
