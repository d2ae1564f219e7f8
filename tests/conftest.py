import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from frexport.analysis.engine import Options, analyze  # noqa: E402
from frexport.decode.load import load  # noqa: E402


@pytest.fixture
def diagnose():
    """Load and diagnose paths the way `frexport analyze` does."""

    def run(*paths, prefix=None, **options):
        loaded = load([str(p) for p in paths], prefix=prefix, workers=2)
        return analyze(loaded.traces, loaded.errors, options=Options(**options))

    return run
