"""Cloud Logging's sinks through its REST API, for `navarch events setup` on a gs:// store.

google-cloud-logging is not among the gcp extra's packages; the three calls setup needs
(projects.sinks.get, .create, .patch of the Cloud Logging API v2) go through google.auth's
AuthorizedSession, which the gcp extra has. The methods take the names and keyword
arguments of google-cloud-logging's ConfigServiceV2Client (get_sink, create_sink,
update_sink) and return the LogSink resource as its REST JSON dict. An error answer is
raised as google.api_core's exception of its status (from_http_response: 403
PermissionDenied, 404 NotFound, 409 Conflict), which setup translates at its one boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["LOGGING_API", "LogSinks"]

#: The Cloud Logging API v2 root (Cloud Logging API reference, REST "Service endpoint").
LOGGING_API = "https://logging.googleapis.com/v2"
_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_NOT_FOUND = 404


class LogSinks:
    """A project's log sinks. session: a requests.Session that adds credentials
    (google.auth.transport.requests.AuthorizedSession); tests pass one that answers."""

    def __init__(self, session: Any) -> None:
        self._session = session

    @classmethod
    def from_default_credentials(cls) -> LogSinks:
        """From Application Default Credentials. Raises google.auth's
        DefaultCredentialsError where there are none."""
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=[_SCOPE])
        return cls(AuthorizedSession(credentials))  # type: ignore[no-untyped-call]

    def get_sink(self, *, sink_name: str) -> dict[str, Any] | None:
        """projects.sinks.get: sink_name "projects/P/sinks/S" -> the LogSink, or None
        when there is no such sink."""
        answer = self._session.request("GET", f"{LOGGING_API}/{sink_name}")
        if answer.status_code == _NOT_FOUND:
            return None
        return _json(answer)

    def create_sink(
        self, *, parent: str, sink: dict[str, Any], unique_writer_identity: bool
    ) -> dict[str, Any]:
        """projects.sinks.create: parent "projects/P", sink a LogSink (name, destination,
        filter, description) -> the LogSink made, with its writerIdentity."""
        answer = self._session.request(
            "POST",
            f"{LOGGING_API}/{parent}/sinks",
            params={"uniqueWriterIdentity": _flag(unique_writer_identity)},
            json=sink,
        )
        return _json(answer)

    def update_sink(
        self,
        *,
        sink_name: str,
        sink: dict[str, Any],
        update_mask: Sequence[str],
        unique_writer_identity: bool,
    ) -> dict[str, Any]:
        """projects.sinks.patch: the fields update_mask names, from sink -> the LogSink."""
        answer = self._session.request(
            "PATCH",
            f"{LOGGING_API}/{sink_name}",
            params={
                "updateMask": ",".join(update_mask),
                "uniqueWriterIdentity": _flag(unique_writer_identity),
            },
            json=sink,
        )
        return _json(answer)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _json(answer: Any) -> dict[str, Any]:
    """The answer's JSON body; an error status raised as google.api_core's exception."""
    if answer.status_code >= 400:
        from google.api_core import exceptions

        raise exceptions.from_http_response(answer)  # type: ignore[no-untyped-call]
    body: dict[str, Any] = answer.json()
    return body
