"""A small OTLP/HTTP trace receiver on 127.0.0.1: decodes each ExportTraceServiceRequest (protobuf)
a real exporter POSTs to /v1/traces and keeps its spans."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        for resource in request.resource_spans:
            service = next(
                (_value(a.value) for a in resource.resource.attributes if a.key == "service.name"), ""
            )
            for scope in resource.scope_spans:
                for s in scope.spans:
                    span = Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        service,
                        {a.key: _value(a.value) for a in s.attributes},
                    )
                    with self._lock:
                        self.spans.append(span)

    def named(self, prefix: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith(prefix)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
