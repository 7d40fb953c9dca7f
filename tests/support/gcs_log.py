"""A recording proxy in front of fake-gcs-server, and GCS requests as IAM permissions.

fake-gcs-server runs in its own process and keeps no request log, so tests point
STORAGE_EMULATOR_HOST at this proxy (127.0.0.1) instead: every request is recorded, then
forwarded unchanged. ``permission`` maps a JSON API request to the Cloud Storage IAM
permission it needs and the object it names (source: Cloud Storage docs, "IAM permissions
for JSON methods").
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True, order=True)
class GcsCall:
    """One request: IAM permission and the object name (or list prefix)."""

    permission: str
    name: str = ""


@dataclass
class GcsLog:
    calls: list[GcsCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    recording: bool = True

    def permissions(self) -> set[str]:
        return {c.permission for c in self.calls}


def permission(method: str, target: str) -> GcsCall | None:
    """The IAM permission a JSON API request needs, or None for a non-API path."""
    parts = urllib.parse.urlsplit(target)
    query = dict(urllib.parse.parse_qsl(parts.query))
    segments = [urllib.parse.unquote(s) for s in parts.path.strip("/").split("/")]
    if segments[:1] == ["upload"] and segments[-1] == "o":
        return GcsCall("storage.objects.create", query.get("name", ""))
    if "o" not in segments:
        return GcsCall(f"storage.buckets.{method.lower()}") if "b" in segments else None
    i = segments.index("o")
    name = "/".join(segments[i + 1 :])
    if not name:
        return GcsCall("storage.objects.list", query.get("prefix", ""))
    by_method = {
        "GET": "storage.objects.get",
        "DELETE": "storage.objects.delete",
        "PATCH": "storage.objects.update",
        "PUT": "storage.objects.update",
    }
    return GcsCall(by_method.get(method, f"storage.objects.{method.lower()}"), name)


@contextmanager
def recording_proxy(upstream: str, log: GcsLog) -> Iterator[str]:
    """Serve a proxy to upstream (http://host:port) on 127.0.0.1; yields its URL."""
    up = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            call = permission(self.command, self.path)
            if call is not None and log.recording:
                with log.lock:
                    log.calls.append(call)
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
