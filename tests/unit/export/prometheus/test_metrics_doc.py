"""docs/metrics.md documents every family the sidecar can expose, with its type, and nothing else."""

import re

from frexport.cli.serve import build_sidecar
from frexport.config import Config, Evidence, EvidenceUpload, Traces
from frexport.export.prometheus import scrape_collector
from tests.support import paths

METRICS_MD = paths.ROOT / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `(frexport_\w+)` \| (\w+) \|", re.M)
_SUFFIX = {"counter": "_total"}  # the exposed name of a counter family


def documented() -> dict[str, str]:
    return dict(_ROW.findall(METRICS_MD.read_text()))


def exposed(tmp_path) -> dict[str, str]:
    """From describe(), with every optional part on: the evidence sink, its upload and the OTLP sink."""
    upload = EvidenceUpload(endpoint="http://127.0.0.1:9", bucket="b", access_key_id="k", secret_access_key="s")
    cfg = Config(evidence=Evidence(dir=str(tmp_path), upload=upload), traces=Traces(enabled=True))
    sidecar, _registry = build_sidecar(cfg)
    scrape = scrape_collector(sidecar.state, sidecar.health, sidecar.analysis, sidecar.sinks)
    return {m.name + _SUFFIX.get(m.type, ""): m.type for m in scrape.describe()}


def test_every_exposed_family_is_documented_with_its_type(tmp_path):
    have, doc = exposed(tmp_path), documented()
    assert {"frexport_otlp_spans_total", "frexport_evidence_bundles_total", "frexport_evidence_uploads_total",
            "frexport_build_info"} <= set(have)
    assert sorted(set(have) - set(doc)) == [], "exposed but not in docs/metrics.md"
    assert sorted(set(doc) - set(have)) == [], "in docs/metrics.md but not exposed"
    assert {n: t for n, t in doc.items() if have.get(n) != t} == {}, "documented with another type"
