"""Which frexport is running.

    # HELP frexport_build_info frexport version
    # TYPE frexport_build_info gauge
    frexport_build_info{version="0.1.0"} 1.0
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from frexport import __version__


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily("frexport_build_info", "frexport version", labels=["version"])


class BuildInfoCollector:
    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        g = _family()
        g.add_metric([__version__], 1.0)
        yield g
