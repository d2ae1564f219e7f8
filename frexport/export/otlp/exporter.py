"""The OTLP span exporter the standard OpenTelemetry variables ask for.

The protocol comes from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL
(`grpc` by default, or `http/protobuf`); the exporter itself reads the rest (endpoint, headers,
timeout, compression, insecure). Its packages are the `otlp` extra, imported only when traces are on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.sdk.trace.export import SpanExporter

PROTOCOLS = ("grpc", "http/protobuf")


def protocol_of(env: Mapping[str, str]) -> str:
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    if protocol not in PROTOCOLS:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use grpc or http/protobuf")
    return protocol


def schedule_delay_s(env: Mapping[str, str]) -> float:
    """OTEL_BSP_SCHEDULE_DELAY, the SDK batch processor's longest wait before an export (ms; 5000 by
    default), in seconds."""
    return otel_number(env, "OTEL_BSP_SCHEDULE_DELAY", "5000", 3_600_000, "milliseconds from 0 to 3600000") / 1000


def otel_number(env: Mapping[str, str], name: str, default: str, most: float, what: str) -> float:
    """A number from 0 to `most` that an OTEL_* variable gives (`default` where unset); ValueError naming
    `what` it should be, where the SDK would log a warning and use its default."""
    raw = env.get(name) or default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= most:  # (NaN too)
        raise ValueError(f"{name}={raw[:60]!r}: {what}")
    return value


def make_exporter(env: Mapping[str, str] | None = None) -> SpanExporter:
    if protocol_of(os.environ if env is None else env) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter()
    # (another name: mypy takes two classes imported as one name for a redefinition)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
    return HttpSpanExporter()
