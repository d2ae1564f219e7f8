"""Outcome is a StrEnum: its members are the `outcome` label values wherever a string is wanted. Python
3.10 (requires-python) has no enum.StrEnum; model/outcome.py defines what frexport uses of it there
(found by mypy with python_version 3.10: the import failed, so frexport did not import at all)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from frexport.model import outcome

_SOURCE = Path(outcome.__file__)


def _outcome_module(monkeypatch, version: tuple):
    monkeypatch.setattr(sys, "version_info", version)
    spec = importlib.util.spec_from_file_location("_outcome_as_on", _SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", [(3, 10, 13, "final", 0), tuple(sys.version_info)])
def test_outcomes_are_their_label_values_as_strings(monkeypatch, version):
    m = _outcome_module(monkeypatch, version)
    o = m.Outcome.TIMED_OUT
    assert isinstance(o, str) and o == "timed_out" and o.value == "timed_out"
    assert str(o) == f"{o}" == "{}".format(o) == "%s" % o == "timed_out"
    assert json.dumps({"outcome": o}) == '{"outcome": "timed_out"}'
    assert m.Outcome("pending") is m.Outcome.PENDING and {o: 1}["timed_out"] == 1
    assert m.classify("scheduled", True, m.Recorder.EVENTS) is m.Outcome.TIMED_OUT
