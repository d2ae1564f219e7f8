"""How many examples the property tests run: the Hypothesis profiles that tests/conftest.py loads, and
the counts of the tests that set their own, kept in proportion to the profile.

While developing (`pytest -m "not e2e"`, the default profile) a property test runs a sixth of what the
full run (scripts/test.sh: HYPOTHESIS_PROFILE=thorough) runs; the full run runs the counts the tests name.
An explicit `max_examples` overrides the profile, so a test that needs more than the profile gives
(a space of pieces to cover, a cheap property) names its thorough count through `examples()`."""

from hypothesis import settings

DEFAULT = 50  # the default profile's max_examples: the unit tier while developing
THOROUGH = 300  # HYPOTHESIS_PROFILE=thorough: the full run CI makes


def examples(thorough: int) -> int:
    """`thorough` examples under the thorough profile; under another, the same share of it as the
    profile's own count (a sixth under the default profile), never fewer than 10."""
    return max(min(thorough, 10), thorough * settings.default.max_examples // THOROUGH)
