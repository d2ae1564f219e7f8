"""Shared fixtures. Tests under tests/e2e/ are marked `e2e` here: `pytest -m "not e2e"` runs the unit
tier, the in-process tests, in under 45 s on the 2-core development machine when nothing else runs
there (25 s of CPU and 12 s of deliberate waits; 40-47 s measured while other work held a load of 1-2,
more under heavier load). What starts a torch job or `python -m frexport`, or waits seconds on purpose,
belongs under tests/e2e/, which the full run (scripts/test.sh) runs too."""

import os
import socketserver
from pathlib import Path

import pytest
from hypothesis import settings

from frexport.analysis.engine import Options, analyze
from frexport.decode.load import load
from frexport.decode.stacks import read_stack_dir
from tests.support import examples

_E2E = Path(__file__).parent / "e2e"

# Property tests: 50 examples while developing, 300 in the full run that CI makes (scripts/test.sh
# sets HYPOTHESIS_PROFILE=thorough); a test that names its own count names the thorough one through
# tests/support/examples.py, which scales it to the profile. No per-example deadline: speed is
# measured in benchmarks, not asserted on a loaded 2-core machine.
settings.register_profile("default", max_examples=examples.DEFAULT, deadline=None)
settings.register_profile("thorough", max_examples=examples.THOROUGH, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Servers started in this process (the web server, test peers) stop within 20 ms of shutdown():
# socketserver looks for it every poll_interval, 0.5 s unless given, and each test that stopped a
# server waited that long (a third of the unit tier's time). What a server answers is not changed.
_serve_forever = socketserver.BaseServer.serve_forever


def _serve_forever_stopping_promptly(self, poll_interval: float = 0.02) -> None:
    _serve_forever(self, poll_interval)


socketserver.BaseServer.serve_forever = _serve_forever_stopping_promptly  # type: ignore[method-assign]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _E2E in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def diagnose():
    """Load and diagnose paths the way `frexport analyze` does: decoded in a sandboxed worker (one: each
    is a fork of the test process; several decode the same, tests/unit/decode/test_load_workers.py)."""

    def run(*paths, prefix=None, **options):
        loaded = load([str(p) for p in paths], prefix=prefix, workers=1)
        stacks, calls = {}, {}  # the stacks lying beside the dumps, read as `frexport analyze` reads them
        for p in paths:
            if Path(p).is_dir():
                threads, args = read_stack_dir(str(p))
                stacks.update(threads)
                calls.update(args)
        return analyze(loaded.traces, loaded.errors, options=Options(**options), stacks=stacks, calls=calls)

    return run
