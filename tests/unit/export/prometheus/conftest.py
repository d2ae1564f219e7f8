import pytest

from tests.unit.export.prometheus.scenario import Scenario, build


@pytest.fixture
def scenario(tmp_path) -> Scenario:
    """The fixed state of scenario.py, its evidence sink writing under tmp_path."""
    return build(str(tmp_path))
