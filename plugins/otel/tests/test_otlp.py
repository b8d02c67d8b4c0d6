"""The spans through the real OTLP/HTTP exporter, decoded by a loopback receiver."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from nrllm_otel import OtelSink


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[ExportTraceServiceRequest] = []


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_the_runs_spans_arrive_over_otlp_http(make_host, echo, receiver):
    exporter = OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces", timeout=5
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    turns = [
        {"content": "", "tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "x"}}]},
        {"content": "done"},
    ]
    outcome = make_host(turns, echo(), sink=OtelSink(tracer_provider=provider)).run("Go")
    provider.shutdown()
    spans = [
        span
        for request in receiver.requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        if scope.scope.name == "nrllm_otel"
        for span in scope.spans
    ]
    names = sorted(s.name for s in spans)
    assert names == ["chat tiny-1", "chat tiny-1", "execute_tool echo", "invoke_agent nrllm"]
    (run,) = [s for s in spans if s.name == "invoke_agent nrllm"]
    attributes = {a.key: a.value.string_value for a in run.attributes}
    assert attributes["gen_ai.conversation.id"] == outcome.run_id
    assert all(s.trace_id == run.trace_id for s in spans)
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
