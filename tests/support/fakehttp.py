"""One small base for the local fakes of cloud REST APIs (Compute Engine, Lambda Cloud, GCS).

A fake is a `FakeAPI` subclass: the cloud's state in memory plus a route table of
`Route(method, path regex, handler)`. `serve(fake)` runs it on a ThreadingHTTPServer on
127.0.0.1 (an ephemeral port). The base gives every fake the same three tools:

- call recording: every request is appended to `fake.calls` as `Call(method, path, data)`,
  data being what the API carries its arguments in (`call_data`: the JSON body by
  default, the query for Compute); `fake.count(method, path_regex)` counts them.
- failure injection: `fake.fail(method, path_regex, status, code, message, times)` answers
  the next `times` matching requests (-1: all) with the API's own error envelope
  (`error_body`), after `authorize` and before any route.
- a held request: with `hold_nth = n`, the n-th request matching `HOLD` blocks until
  `release` is set (`holding` is set meanwhile), is then answered, and sets `held_done`;
  for killing a client while its launch is in flight.

Handlers run under `fake.lock` and return `(status, JSON-able body or None)`, or
`(status, body, headers)` when the answer carries headers (an ARM long-running operation's
Azure-AsyncOperation, say).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, NamedTuple
from urllib.parse import parse_qs, urlparse

Answer = tuple[int, Any] | tuple[int, Any, dict[str, str]]


@dataclass(frozen=True)
class Request:
    """One parsed request: path without the query, query as parse_qs gives it, JSON body."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: Message


class Call(NamedTuple):
    """A recorded request: method, path (no query) and the fake's `call_data` of it."""

    method: str
    path: str
    data: Any


class Route(NamedTuple):
    """method + full-match path regex -> handler(fake, request, match) -> (status, body)."""

    method: str
    path: str
    handler: Callable[[Any, Request, re.Match[str]], Answer]


@dataclass
class Failure:
    """A canned error for requests matching method + path regex (times: how many, -1 always)."""

    method: str
    path: str
    status: int
    code: str
    message: str = "injected"
    times: int = 1
    #: an HTML page answered instead of the API's JSON envelope (fail_page)
    page: str | None = None


#: An outage page as a load balancer or proxy in front of an API answers it. Composed for
#: these tests (the usual shape: doctype, title, heading, a line of text), not copied.
OUTAGE_PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>502 Bad Gateway</title></head>
<body>
<h1>502 Bad Gateway</h1>
<p>The upstream server is temporarily unavailable.
Please try again in a few minutes.</p>
</body>
</html>
"""


@dataclass(frozen=True)
class Raw:
    """An answer body sent as it is, not as JSON, with its content type."""

    body: bytes
    content_type: str = "text/html; charset=utf-8"


@dataclass
class FakeAPI:
    """State shared by every fake: lock, injected failures, recorded calls, the held request.

    Subclasses set ROUTES, NO_ROUTE_CODE, optionally HOLD, and override `error_body`
    (their error envelope), `authorize` and `call_data` where their API differs.
    """

    ROUTES: ClassVar[tuple[Route, ...]] = ()
    NO_ROUTE_CODE: ClassVar[str] = "notFound"
    HOLD: ClassVar[tuple[str, str] | None] = None  # (method, path regex) hold_nth counts

    failures: list[Failure] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    hold_nth: int | None = None
    held_seen: int = 0
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    held_done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the API's own shapes (override) ---------------------------------------------------
    def error_body(self, status: int, code: str, message: str) -> Any:
        """The API's error envelope for an HTTP status, error code/reason and message."""
        return {"error": {"code": code, "message": message}}

    def authorize(self, request: Request) -> Answer | None:
        """An error answer for a request the API would refuse before routing, else None."""
        return None

    def call_data(self, request: Request) -> Any:
        """What `calls` records of a request besides method and path (default: its body)."""
        return request.body

    # -- test controls -----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget calls and failures and release any hold (subclasses add their state)."""
        with self.lock:
            self.failures.clear()
            self.calls.clear()
            self.hold_nth = None
            self.held_seen = 0
            for event in (self.holding, self.release, self.held_done):
                event.clear()

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        code: str,
        message: str = "injected",
        times: int = 1,
    ) -> None:
        """Answer the next `times` requests matching method + path regex with an error (-1: all)."""
        with self.lock:
            self.failures.append(Failure(method, path, status, code, message, times))

    def fail_page(
        self, method: str, path: str, status: int, page: str = OUTAGE_PAGE, times: int = 1
    ) -> None:
        """Answer the next `times` requests matching method + path regex with an HTML page
        and this status (-1: all), as a proxy or an outage page in front of the API does."""
        with self.lock:
            self.failures.append(Failure(method, path, status, "", "", times, page))

    def count(self, method: str, pattern: str) -> int:
        """How many recorded requests had this method and a path matching the regex."""
        return sum(1 for c in self.calls if c.method == method and re.search(pattern, c.path))

    def error(self, status: int, code: str, message: str) -> Answer:
        return status, self.error_body(status, code, message)

    # -- serving -------------------------------------------------------------------------
    def answer(self, request: Request) -> Answer:
        """Record, authorize, inject a failure, or route one request (under the lock)."""
        with self.lock:
            self.calls.append(Call(request.method, request.path, self.call_data(request)))
            refused = self.authorize(request)
            if refused is not None:
                return refused
            failure = self._take_failure(request)
            if failure is not None and failure.page is not None:
                return failure.status, Raw(failure.page.encode())
            if failure is not None:
                return self.error(failure.status, failure.code, failure.message)
            for route in self.ROUTES:
                match = re.fullmatch(route.path, request.path)
                if route.method == request.method and match:
                    return route.handler(self, request, match)
            return self.error(404, self.NO_ROUTE_CODE, f"no route {request.method} {request.path}")

    def _take_failure(self, request: Request) -> Failure | None:
        for f in self.failures:
            if f.method == request.method and re.search(f.path, request.path):
                if f.times > 0:
                    f.times -= 1
                    if f.times == 0:
                        self.failures.remove(f)
                return f
        return None

    def _hold(self, request: Request) -> bool:
        """Block the n-th request on HOLD until `release`; True when this one was held."""
        if self.HOLD is None or request.method != self.HOLD[0]:
            return False
        if not re.fullmatch(self.HOLD[1], request.path):
            return False
        with self.lock:
            self.held_seen += 1
            held = self.held_seen == self.hold_nth
        if held:
            self.holding.set()
            self.release.wait(60)
        return held


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        fake = self.server.fake
        url = urlparse(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        request = Request(method, url.path, parse_qs(url.query), body, self.headers)
        held = fake._hold(request)
        try:
            status, out, *extra = fake.answer(request)
            raw = out if isinstance(out, Raw) else None
            data = raw.body if raw else b"" if out is None else json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", raw.content_type if raw else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client was killed while we held its request
        finally:
            if held:
                fake.held_done.set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAPI


@contextmanager
def serve(fake: FakeAPI) -> Iterator[str]:
    """Serve `fake` on 127.0.0.1 (ephemeral port) for the block; yields "http://127.0.0.1:PORT"."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
