"""Every property test follows the Hypothesis profile (tests/conftest.py): a count named in @settings
overrides the profile, so one is named only through tests/support/examples.py, which keeps the
thorough count for the full run and scales it down while developing."""

import re
from pathlib import Path

from hypothesis import settings

from tests.support import examples

TESTS = Path(__file__).parents[1]


def test_explicit_example_counts_go_through_the_profile():
    literal = re.compile(r"max_examples\s*=\s*(?!examples\()")
    found = [f"{p.relative_to(TESTS)}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name != "conftest.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == [], "name the thorough count through tests.support.examples.examples(): " + ", ".join(found)


def test_the_thorough_count_is_kept_under_the_thorough_profile_and_scaled_under_the_others():
    assert examples.examples(3000) == 3000 * settings.default.max_examples // examples.THOROUGH
    name = settings.get_current_profile_name()
    try:
        settings.load_profile("thorough")
        assert examples.examples(3000) == 3000 and examples.examples(25) == 25
        settings.load_profile("default")
        assert examples.examples(3000) == 500 and examples.examples(150) == 25 and examples.examples(25) == 10
    finally:
        settings.load_profile(name)
