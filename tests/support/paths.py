"""Where things are in the repository, for tests and benchmarks."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
REAL_FIXTURES = FIXTURES / "real"
JOBS = TESTS / "jobs"
REALJOBS = TESTS / "realjobs"
BENCHMARKS = ROOT / "benchmarks"
RULES = ROOT / "config" / "prometheus" / "frexport-rules.yaml"
