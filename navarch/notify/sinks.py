"""Notification sinks: log (JSON lines), webhook (signed JSON), Slack, PagerDuty, and
navarch.notifiers plugins (PluginSink).

Each sink takes a batch of events (already filtered for it) and raises NotifyError when
delivery failed; the dispatcher logs and counts that, it never fails the apply. HTTP goes
through requests with urllib3's Retry (exponential backoff, Retry-After honoured, retries
on connection errors, timeouts, 429 and 5xx) and a per-attempt timeout, so one sink blocks
an apply for at most (retries + 1) x timeout plus the backoff (capped at 5 s per wait).

Secrets ({env: VAR} / {file: PATH}: the webhook's signing key, the Slack URL, the
PagerDuty routing key) are read at send time and never logged: errors name the sink and
the HTTP status, never a URL.

Wire formats:
- webhook: POST one JSON object per event (Event.to_json(), with its "time"), headers
  Content-Type: application/json, X-Navarch-Event: KIND, X-Navarch-Signature:
  sha256=HEX, the HMAC-SHA256 of the exact body bytes under the secret (GitHub's
  X-Hub-Signature-256 convention).
- slack: one incoming-webhook message per batch, {"text": ...} from
  templates/notify-slack.txt.j2 (Slack incoming webhooks: a JSON body with "text").
- pagerduty: Events API v2, POST {"routing_key", "event_action": "trigger"|"resolve",
  "dedup_key", "payload": {"summary", "source", "severity", "component", "group",
  "class", "custom_details"}} per condition event (PagerDuty Events API v2 reference).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from navarch.errors import ConfigError, NotifyError, PluginError
from navarch.fleet.spec import SinkSpec
from navarch.notify.events import SEVERITY, Event, EventKind, Severity
from navarch.templating import environment
from navarch.textsafe import counted, node_text, slack_mrkdwn

# requests is imported where a sink posts (http_session, _post): a run that sends nothing
# over HTTP, and the CLI's other commands, never load it.
if TYPE_CHECKING:
    import requests

PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
#: First pause before the webhook sink tries its failed events again (then doubling).
WEBHOOK_BACKOFF_S = 0.2
#: Longest value one Slack line prints (Slack truncates a message's text at 40,000).
SLACK_VALUE_MAX_CHARS = 1000
#: Kinds a sink gets when fleet.yaml lists none: everything, except PagerDuty, which
#: pages on what needs a human now (the breaker, a capacity halt, an auth failure).
PAGERDUTY_DEFAULT = frozenset(
    {EventKind.BREAKER_TRIPPED, EventKind.CAPACITY_EXHAUSTED, EventKind.AUTH_FAILURE}
)
#: PagerDuty Events API v2 payload.severity values.
_PD_SEVERITY = {Severity.INFO: "info", Severity.WARNING: "warning", Severity.CRITICAL: "critical"}


def resolve_secret(ref: Mapping[str, str], base_dir: Path, where: str) -> str:
    """The value a secret reference names: {"value": V}, {"env": VAR}, {"file": PATH}.

    where: the key path for errors (e.g. "notify[1].secret"). Raises ConfigError naming
    the variable or file (never the value) when it is unset, unreadable or empty.
    """
    if "value" in ref:
        return ref["value"]
    if "env" in ref:
        value = os.environ.get(ref["env"], "").strip()
        if not value:
            raise ConfigError(
                f"environment variable {ref['env']} is empty or unset",
                key_path=where,
                hint="export it, e.g. from your CI secret store",
            )
        return value
    path = Path(ref["file"])
    path = path if path.is_absolute() else base_dir / path
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", key_path=where) from exc
    if not value:
        raise ConfigError(f"{path} is empty", key_path=where)
    return value


def accepts(sink: SinkSpec, event: Event) -> bool:
    """Whether `sink` gets `event`: its kind is in the sink's events (a clear goes where
    its condition's start went) and its severity (a clear: its condition's) is at least
    the sink's min_severity."""
    kinds = (
        frozenset(EventKind(k) for k in sink.events)
        if sink.events
        else PAGERDUTY_DEFAULT
        if sink.type == "pagerduty"
        else frozenset(EventKind)
    )
    kind = event.clears or event.kind
    if kind not in kinds and event.kind not in kinds:
        return False
    severity = SEVERITY[event.clears] if event.clears else event.severity
    return severity.rank >= Severity(sink.min_severity).rank


def http_session(retries: int) -> requests.Session:
    """A requests Session whose adapter retries POSTs with urllib3's Retry: connection
    errors, read timeouts, 429 and 5xx; backoff 0.5 s doubling (capped at 5 s), honouring
    Retry-After."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=0.5,
        backoff_max=5,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"POST", "PUT"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class Sink(Protocol):
    """Delivers a batch of events; raises NotifyError when it could not."""

    spec: SinkSpec

    def send(self, events: Sequence[Event]) -> int:
        """Deliver events -> how many requests/lines were sent."""
        ...


def _post(sink: SinkSpec, url: str, body: bytes, headers: Mapping[str, str]) -> None:
    """POST body; raise NotifyError (sink name and status only) unless 2xx."""
    import requests

    try:
        with http_session(sink.retries) as session:
            resp = session.post(
                url,
                data=body,
                timeout=sink.timeout_s,
                headers={"Content-Type": "application/json", "User-Agent": "navarch", **headers},
            )
    except requests.RequestException as exc:
        raise NotifyError(
            f"sink {sink.name} ({sink.type}): {type(exc).__name__} after {sink.retries} retries"
        ) from None
    if not 200 <= resp.status_code < 300:
        raise NotifyError(f"sink {sink.name} ({sink.type}): HTTP {resp.status_code}")


class LogSink:
    """JSON lines, one per event: to spec.path (relative to the fleet file) or stderr."""

    def __init__(self, spec: SinkSpec, base_dir: Path) -> None:
        self.spec = spec
        self.path = (
            None
            if spec.path is None
            else (Path(spec.path) if Path(spec.path).is_absolute() else base_dir / spec.path)
        )

    def send(self, events: Sequence[Event]) -> int:
        lines = "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in events)
        try:
            if self.path is None:
                sys.stderr.write(lines)
                sys.stderr.flush()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as fh:
                    fh.write(lines)
        except OSError as exc:
            raise NotifyError(f"sink {self.spec.name} (log): {exc.strerror}") from None
        return len(events)


class WebhookSink:
    """POST each event as JSON, signed: X-Navarch-Signature: sha256=HMAC(secret, body).

    An event that fails (after the adapter's own retries) does not stop the others; the
    failed ones are tried again, oldest first, with a doubling pause (WEBHOOK_BACKOFF_S),
    while the sink's time budget ((retries + 1) x timeout) lasts. No event is posted once
    the budget is spent, so a sink that times out holds an apply for about the budget
    whatever the number of events. NotifyError then names how many were not delivered.
    """

    def __init__(self, spec: SinkSpec, base_dir: Path, index: int) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.index = index

    def send(self, events: Sequence[Event]) -> int:
        assert self.spec.url is not None and self.spec.secret is not None
        url = resolve_secret(self.spec.url, self.base_dir, f"notify[{self.index}].url")
        key = resolve_secret(
            self.spec.secret, self.base_dir, f"notify[{self.index}].secret"
        ).encode()
        deadline = time.monotonic() + (self.spec.retries + 1) * self.spec.timeout_s
        left = list(events)
        pause_s = WEBHOOK_BACKOFF_S
        last: NotifyError | None = None
        while True:
            failed: list[Event] = []
            for i, e in enumerate(left):
                if time.monotonic() >= deadline:
                    # The budget is spent: a dead sink holds the apply for it once, not
                    # once per event.
                    failed.extend(left[i:])
                    break
                body = json.dumps(e.to_json(), sort_keys=True).encode()
                signature = hmac.new(key, body, hashlib.sha256).hexdigest()
                try:
                    _post(
                        self.spec,
                        url,
                        body,
                        {
                            "X-Navarch-Event": e.kind.value,
                            "X-Navarch-Signature": f"sha256={signature}",
                        },
                    )
                except NotifyError as exc:
                    failed.append(e)
                    last = exc
            if not failed:
                return len(events)
            if time.monotonic() + pause_s >= deadline:
                raise NotifyError(
                    f"{last}; {len(failed)} of {counted(len(events), 'event')} not delivered"
                )
            time.sleep(pause_s)
            pause_s *= 2
            left = failed


def _slack_value(value: object) -> str:
    """Every value the Slack template prints: one capped line escaped for mrkdwn (event
    messages quote node reports, and Slack acts on <!channel> and <url|label>)."""
    return slack_mrkdwn(node_text(str(value), SLACK_VALUE_MAX_CHARS))


@cache
def _slack_template() -> Any:
    return environment(finalize=_slack_value).get_template("notify-slack.txt.j2")


class SlackSink:
    """One incoming-webhook message per batch: a compact summary, worst first."""

    def __init__(self, spec: SinkSpec, base_dir: Path, index: int) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.index = index

    def send(self, events: Sequence[Event]) -> int:
        assert self.spec.url is not None
        url = resolve_secret(self.spec.url, self.base_dir, f"notify[{self.index}].url")
        ordered = sorted(events, key=lambda e: -e.severity.rank)
        text = _slack_template().render(
            fleet=events[0].fleet,
            events=ordered,
            icon={
                "info": ":information_source:",
                "warning": ":warning:",
                "critical": ":rotating_light:",
            },
        )
        _post(self.spec, url, json.dumps({"text": text.strip()}).encode(), {})
        return 1


class PagerDutySink:
    """Events API v2: a condition's start triggers, its clear resolves, one dedup key per
    fleet + pool + condition; one-off events are not sent (they page nobody)."""

    def __init__(self, spec: SinkSpec, base_dir: Path, index: int) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.index = index

    def send(self, events: Sequence[Event]) -> int:
        assert self.spec.routing_key is not None
        key = resolve_secret(
            self.spec.routing_key, self.base_dir, f"notify[{self.index}].routing_key"
        )
        url = (
            resolve_secret(self.spec.url, self.base_dir, f"notify[{self.index}].url")
            if self.spec.url
            else PAGERDUTY_URL
        )
        sent = 0
        for e in events:
            if e.condition is None:
                continue
            body: dict[str, Any] = {
                "routing_key": key,
                "dedup_key": e.dedup_key(),
                "event_action": "resolve" if e.clears else "trigger",
            }
            if not e.clears:
                body["payload"] = {
                    "summary": f"navarch {e.fleet}: {e.message}"[:1024],
                    "source": f"navarch/{e.fleet}",
                    "severity": _PD_SEVERITY[e.severity],
                    "component": e.pool,
                    "group": e.fleet,
                    "class": e.kind.value,
                    "custom_details": dict(e.details),
                }
            _post(self.spec, url, json.dumps(body).encode(), {})
            sent += 1
        return sent


class PluginSink:
    """A navarch.notifiers plugin (navarch.plugins.NotifierFactory): built from the sink's
    mapping, then called once per event with its JSON form (Event.to_json()).

    The plugin is loaded and built at send time, after the apply (still under the lease,
    so each call is bounded by the sink's `timeout`, default 5 s: a hung notifier cannot
    hold the fleet's lease): a plugin that fails to import, builds something that is not
    callable, raises outside navarch's error tree, does not return in time or returns
    anything but None raises PluginError, whose one line names the plugin; the
    dispatcher logs it as this sink's failed delivery and the apply's exit code stays the
    same (notifications are after the fact). Events sent before a failure stay sent.
    """

    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec

    def _config(self) -> dict[str, Any]:
        return {
            "type": self.spec.type,
            "name": self.spec.name,
            "events": list(self.spec.events),
            "min_severity": self.spec.min_severity,
            "options": dict(self.spec.options or {}),
        }

    def send(self, events: Sequence[Event]) -> int:
        from navarch.plugins import Group, call_within, load

        found = load(Group.NOTIFIERS, self.spec.type)
        if found is None:  # uninstalled between loading fleet.yaml and now
            raise NotifyError(
                f"sink {self.spec.name}: no {Group.NOTIFIERS} plugin "
                f"{self.spec.type!r} is installed"
            )
        ref, factory = found
        timeout_s = self.spec.timeout_s
        deliver = call_within(ref, timeout_s, factory, self._config())
        if not callable(deliver):
            raise PluginError(
                ref, f"returned a {type(deliver).__name__}, not a send(event) callable"
            )
        for e in events:
            got = call_within(ref, timeout_s, deliver, e.to_json())
            if got is not None:
                raise PluginError(ref, f"send returned a {type(got).__name__}, not None")
        return len(events)


def open_sink(spec: SinkSpec, base_dir: Path, index: int) -> Sink:
    """The Sink for one notify: item (index: its position, for error key paths); a type
    outside navarch.fleet.load.BUILTIN_SINKS is a navarch.notifiers plugin (PluginSink)."""
    if spec.type == "log":
        return LogSink(spec, base_dir)
    if spec.type == "webhook":
        return WebhookSink(spec, base_dir, index)
    if spec.type == "slack":
        return SlackSink(spec, base_dir, index)
    if spec.type == "pagerduty":
        return PagerDutySink(spec, base_dir, index)
    return PluginSink(spec)
