"""OpenTelemetry spans of collectives over OTLP (docs/traces.md), in three parts:

- spans.py: the mapping of entries and findings to spans, resources and ids (pure);
- checkpoint.py: a SpanExporter wrapper that records exported progress, for exactly once across restarts;
- pipeline.py: the sink: a bounded queue, the export thread, flush and shutdown, self-metrics;
- exporter.py: the OTLP exporter the standard variables ask for.
"""

from frexport.export.otlp.exporter import make_exporter
from frexport.export.otlp.pipeline import OtlpSink

__all__ = ["OtlpSink", "make_exporter"]
