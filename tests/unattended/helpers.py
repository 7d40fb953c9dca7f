"""Helpers for the unattended-run tests: a recording HTTP server on 127.0.0.1 (webhook, Slack,
PagerDuty and Pushgateway stand-in), and local-provider fleet files."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Recorder:
    """A stdlib HTTP server on 127.0.0.1 recording every request; `delay_s[path]` makes a
    path answer only after that many seconds (a sink that times out); `status[path]`
    overrides the 200; `fail_first[path] = n` answers 503 to the first n requests."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.delay_s: dict[str, float] = {}
        self.status: dict[str, int] = {}
        self.fail_first: dict[str, int] = {}
        self._lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with rec._lock:
                    rec.requests.append(Request(self.command, self.path, dict(self.headers), body))
                delay = rec.delay_s.get(self.path, 0.0)
                if delay:
                    time.sleep(delay)
                status = rec.status.get(self.path, 200)
                with rec._lock:
                    if rec.fail_first.get(self.path, 0) > 0:
                        rec.fail_first[self.path] -= 1
                        status = 503
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_PUT = do_GET = do_DELETE = _serve  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def at(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def write_fleet(directory: Path, **top: Any) -> Path:
    """fleet.example.yaml with top-level keys replaced or added (notify, metrics, ...)."""
    doc = yaml.safe_load((REPO / "fleet.example.yaml").read_text())
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
