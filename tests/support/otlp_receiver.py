"""Real OTLP peers for tests: a gRPC TraceService server and an OTLP/HTTP endpoint.

Both decode the protobuf ExportTraceServiceRequest with opentelemetry-proto and keep the spans
(with their resource attributes) for assertions. They listen on 127.0.0.1 only.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict
    resource: dict
    events: list


@dataclass
class Received:
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, req: trace_service_pb2.ExportTraceServiceRequest) -> None:
        out = []
        for rs in req.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(ReceivedSpan(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                            s.start_time_unix_nano, s.end_time_unix_nano, s.status.code,
                                            {a.key: _value(a.value) for a in s.attributes}, resource,
                                            [(e.name, {a.key: _value(a.value) for a in e.attributes})
                                             for e in s.events]))
        with self.lock:
            self.spans.extend(out)
            self.requests += 1


class GrpcReceiver:
    def __init__(self) -> None:
        self.received = Received()
        received = self.received

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802
                received.add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "GrpcReceiver":
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(0)


class HttpReceiver:
    def __init__(self) -> None:
        self.received = Received()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                received.add(req)
                out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HttpReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
