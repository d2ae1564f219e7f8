"""`frexport analyze` holds the loaded traces until it prints: the cyclic collector stays off while
it loads and diagnoses (its passes over them cost 0.6 s of CPU at 4096 ranks: benchmarks/README.md)
and is as it was again for a caller in the same process."""

import gc

import pytest

from frexport.cli import analyze
from frexport.cli.main import main
from tests.support.paths import REAL_FIXTURES


@pytest.fixture
def seen(monkeypatch) -> dict[str, bool]:
    """Whether the collector was on when the command loaded the dumps and when it diagnosed them."""
    out: dict[str, bool] = {}

    def watched(name, fn):
        def call(*args, **kwargs):
            out[name] = gc.isenabled()
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(analyze, "load_jobs", watched("load", analyze.load_jobs))
    monkeypatch.setattr(analyze, "diagnose", watched("diagnose", analyze.diagnose))
    return out


def _analyze() -> int:
    return main(["analyze", str(REAL_FIXTURES / "stuck_before_collective"), "--workers", "1",
                 "--allow-no-memory-limit", "--format", "json"])


def test_the_collector_is_off_while_analyze_loads_and_diagnoses_and_on_after_it(seen, capsys):
    assert gc.isenabled()
    assert _analyze() == 1  # (a finding: the fixture is a hang)
    assert seen == {"load": False, "diagnose": False}
    assert gc.isenabled()
    assert '"verdict"' in capsys.readouterr().out


def test_a_caller_that_turned_the_collector_off_finds_it_off(seen, capsys):
    gc.disable()
    try:
        _analyze()
        assert not gc.isenabled()
    finally:
        gc.enable()
