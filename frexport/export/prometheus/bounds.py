"""What a family may put into one scrape, whatever the input: valid UTF-8 label values of bounded
length, finite-width values, a bounded number of series, no series twice.

Label values come from dumps and peers (group names and descriptions, op names, file names): a lone
surrogate cannot be encoded, so without this one value made `generate_latest` raise and every scrape
fail; one 8 MiB description made a 285 MB scrape. A family over its series bound keeps its first
series (collectors emit sorted, so the same ones each scrape) and the rest are dropped and counted
(`frexport_metrics_series_dropped_total{family}`), as node_exporter says what it dropped.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

# labels that split one histogram or summary child into several lines: not a series of their own
_CHILD_LABELS = frozenset({"le", "quantile"})


@dataclass(frozen=True)
class Bounds:
    max_series_per_family: int = 50_000  # exposition lines (samples) of one family per scrape
    max_label_chars: int = 256  # longer values are cut, keeping a hash of the whole so they stay distinct


DEFAULT_BOUNDS = Bounds()


def label_value(value: object, max_chars: int) -> str:
    """Valid UTF-8 text (lone surrogates and undecodable file-name bytes shown as \\udcxx escapes),
    at most `max_chars` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text.isascii():
        # fast path above: almost every value is ASCII; only non-ASCII text can hold a surrogate
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > max_chars:  # Config refuses a bound under 32: room for the hash
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        text = f"{text[:max_chars - 16]}...~{digest}"
    return text


def sample_value(value: object) -> float:
    """A float: an int too big for one is clamped to the largest finite float of its sign."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return sys.float_info.max if value > 0 else -sys.float_info.max  # type: ignore[operator]
    except (TypeError, ValueError):
        return math.nan


def bound_family(metric: Metric, bounds: Bounds) -> tuple[Metric, int]:
    """The family with its label values and values made safe, at most `max_series_per_family` samples
    and no sample twice; also how many series (label sets) were left out."""
    kept: list[Sample] = []
    seen: set[tuple] = set()
    children: dict[tuple, bool] = {}  # child label set -> kept
    dropped = 0
    limit, chars = bounds.max_series_per_family, bounds.max_label_chars
    for s in metric.samples:
        labels = {k: label_value(v, chars) for k, v in s.labels.items()}
        child = tuple(sorted((k, v) for k, v in labels.items() if k not in _CHILD_LABELS))
        keep = children.get(child)
        if keep is None:
            # a histogram child is kept or dropped whole: at most 64 more lines for its buckets
            keep = children[child] = len(kept) < limit
            if not keep:
                dropped += 1
        if not keep:
            continue
        identity = (s.name, tuple(sorted(labels.items())))
        if identity in seen:  # two values cut or escaped alike: a second line would fail the scrape
            continue
        seen.add(identity)
        kept.append(s._replace(labels=labels, value=sample_value(s.value)))
    out = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    out.samples = kept
    return out, dropped
