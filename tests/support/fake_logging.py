"""A local fake of Cloud Logging's ConfigServiceV2 sinks (GetSink, CreateSink, UpdateSink),
served over gRPC on 127.0.0.1 (its pytest fixtures are in
tests/support/fake_logging_fixtures.py, which imports this module only when a test asks).

google-cloud-logging's ConfigServiceV2Client has only gRPC transports (3.17.0: grpc and
grpc_asyncio, no REST), so the fake is a gRPC server: the real client talks to it through
a ConfigServiceV2GrpcTransport on an insecure channel. Requests are parsed with the
library's own message types (logging_config.GetSinkRequest and so on), so a request the
API's model would refuse fails to parse; each is recorded as (RPC name, its proto-field
dict). Errors are the API's status codes: NOT_FOUND for a missing sink, and
PERMISSION_DENIED for every call when `denied`, `failure` for every call when set. Source: Cloud Logging API v2 reference,
google.logging.v2.ConfigServiceV2 (GetSink, CreateSink, UpdateSink: update_mask names the
fields to replace; a sink made with unique_writer_identity gets its own writer identity).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.logging_v2.services.config_service_v2 import ConfigServiceV2Client
from google.cloud.logging_v2.services.config_service_v2.transports import (
    ConfigServiceV2GrpcTransport,
)
from google.cloud.logging_v2.types import logging_config as lc

SERVICE = "google.logging.v2.ConfigServiceV2"
WRITER = "serviceAccount:service-123@gcp-sa-logging.iam.gserviceaccount.com"


@dataclass
class FakeLogging:
    """One project's log sinks by full name ("projects/P/sinks/S"), as LogSink messages."""

    sinks: dict[str, lc.LogSink] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    denied: bool = False
    #: a status code and message answered to every call (after denied)
    failure: tuple[grpc.StatusCode, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.sinks.clear()
            self.requests.clear()
            self.denied = False
            self.failure = None

    def _record(self, rpc: str, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append((rpc, type(request).to_dict(request)))
        if self.denied:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED, "Permission 'logging.sinks.get' denied"
            )
        if self.failure is not None:
            context.abort(*self.failure)

    def _found(self, name: str, context: grpc.ServicerContext) -> lc.LogSink:
        if name not in self.sinks:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Sink {name} does not exist")
        return self.sinks[name]

    def get_sink(self, request: lc.GetSinkRequest, context: grpc.ServicerContext) -> lc.LogSink:
        with self.lock:
            self._record("GetSink", request, context)
            return self._found(request.sink_name, context)

    def create_sink(
        self, request: lc.CreateSinkRequest, context: grpc.ServicerContext
    ) -> lc.LogSink:
        with self.lock:
            self._record("CreateSink", request, context)
            name = f"{request.parent}/sinks/{request.sink.name}"
            if name in self.sinks:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"Sink {name} already exists")
            made = lc.LogSink(request.sink)
            made.writer_identity = WRITER
            self.sinks[name] = made
            return made

    def update_sink(
        self, request: lc.UpdateSinkRequest, context: grpc.ServicerContext
    ) -> lc.LogSink:
        with self.lock:
            self._record("UpdateSink", request, context)
            sink = self._found(request.sink_name, context)
            for path in request.update_mask.paths:
                setattr(sink, path, getattr(request.sink, path))
            return sink


def _handler(method: Callable[..., Any], request_type: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        method,
        request_deserializer=request_type.deserialize,
        response_serializer=lc.LogSink.serialize,
    )


def serve(fake: FakeLogging) -> tuple[grpc.Server, str]:
    """Start fake's ConfigServiceV2 on 127.0.0.1 -> (the running server, "127.0.0.1:PORT")."""
    handlers = {
        "GetSink": _handler(fake.get_sink, lc.GetSinkRequest),
        "CreateSink": _handler(fake.create_sink, lc.CreateSinkRequest),
        "UpdateSink": _handler(fake.update_sink, lc.UpdateSinkRequest),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def logging_client(address: str) -> ConfigServiceV2Client:
    """The real ConfigServiceV2Client on an insecure channel to the fake at address."""
    channel = grpc.insecure_channel(address)
    return ConfigServiceV2Client(transport=ConfigServiceV2GrpcTransport(channel=channel))
