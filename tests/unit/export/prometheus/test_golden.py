"""The exact /metrics text of a fixed state (conftest.py), reviewed on every change: a renamed
family, a new label or a changed help text shows up as a diff of tests/unit/export/golden/metrics.txt.

Left out of the comparison, because their values vary from run to run: the `process_*` and
`python_*` families (dropped whole; test_scrape.py checks they are served), the values of
`frexport_scrape_collector_duration_seconds` (replaced by `<duration>`; its labels stay compared),
and frexport's version in `frexport_build_info` (`<version>`: a release is not a metrics change).
Every other value is fixed by the scenario, including the clock.

Regenerate after an intended change, and review the diff:

    FREXPORT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/export/prometheus/test_golden.py
"""

import os
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from frexport import __version__

GOLDEN = Path(__file__).parent.parent / "golden" / "metrics.txt"
_VARYING = ("process_", "python_")
_DURATION = re.compile(r"^(frexport_scrape_collector_duration_seconds\{[^}]*\}) \S+$")
_VERSION = 'frexport_build_info{version="%s"}' % __version__


def stable_exposition(text: str) -> str:
    out = []
    for line in text.splitlines():
        name = line.split(" ")[2] if line.startswith("# ") else line
        if name.startswith(_VARYING):
            continue
        line = line.replace(_VERSION, 'frexport_build_info{version="<version>"}')
        out.append(_DURATION.sub(r"\1 <duration>", line))
    return "\n".join(out) + "\n"


def test_exposition_matches_the_golden_file(scenario):
    text = stable_exposition(generate_latest(scenario.registry(process=True)).decode())
    if os.environ.get("FREXPORT_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
        pytest.skip(f"rewrote {GOLDEN}: review its diff")
    assert text == GOLDEN.read_text(), f"the exposition changed: if intended, regenerate {GOLDEN} (module docstring)"


def test_only_the_varying_parts_are_masked(scenario):
    text = stable_exposition(generate_latest(scenario.registry(process=True)).decode())
    assert not re.search(r"^(process|python)_", text, re.M)
    masked = [line for line in text.splitlines() if "<duration>" in line]
    # one per collector: the seven of export.prometheus.collectors() and the evidence sink
    collectors = ["rank_progress", "collectives", "findings", "waits", "sources", "recorders", "build_info", "evidence"]
    assert masked == [f'frexport_scrape_collector_duration_seconds{{collector="{c}"}} <duration>' for c in collectors]


def test_a_scrape_only_reads(scenario):
    """Collectors read the state, the analysis and the health; scraping twice serves the same text."""
    registry = scenario.registry(process=True)
    first = stable_exposition(generate_latest(registry).decode())
    assert stable_exposition(generate_latest(registry).decode()) == first
