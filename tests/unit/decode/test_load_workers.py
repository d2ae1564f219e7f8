"""Decoding a job in several sandboxed workers gives what one worker gives, rank for rank. (The analysis
tests decode through the `diagnose` fixture with one worker: a fork of the test process each.)"""

import json

import pytest

from frexport.analysis.engine import analyze
from frexport.decode.load import load
from tests.support import paths


@pytest.mark.parametrize("scenario", ["killed_in_allreduce_8", "straggler_2d"])
def test_two_workers_decode_what_one_decodes(scenario):
    d = str(paths.REAL_FIXTURES / scenario)
    one, two = load([d], workers=1), load([d], workers=2)
    assert len(one.traces) >= 4 and [t.rank for t in two.traces] == [t.rank for t in one.traces]
    assert [(e.path, e.rank) for e in two.errors] == [(e.path, e.rank) for e in one.errors]
    docs = [json.dumps(analyze(x.traces, x.errors).to_json(), sort_keys=True) for x in (one, two)]
    assert docs[1] == docs[0]
