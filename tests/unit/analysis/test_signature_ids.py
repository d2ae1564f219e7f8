"""Each trace's signatures as canonical ids, numbered once for the process and kept with the trace
(analysis/signature_ids.py): the same form is the same id on every rank, a trace's ids grow with its
signatures, and a diagnosis is the same whatever the numbering holds (ids past a byte take the slower
column path, a numbering past its bound starts again between analyses)."""

import pytest

from frexport.analysis import signature_ids as ids_module
from frexport.analysis.engine import analyze
from frexport.analysis.signature_ids import signature_ids, start_analysis
from frexport.model.signature import OpSignature
from tests.support.synth import dump, entry, healthy_job, traces


@pytest.fixture(autouse=True)
def fresh_numbering(monkeypatch):
    """Each test starts from an empty numbering (the process's is shared by every analysis run before)."""
    monkeypatch.setattr(ids_module, "_ids", {})
    monkeypatch.setattr(ids_module, "_of_sig", {})
    monkeypatch.setattr(ids_module, "_generation", ids_module._generation + 1)


def _sig(op: str, n: int) -> tuple[OpSignature, ...]:
    return (OpSignature(op, ((n,),), ((n,),), ("Float",), ("Float",)),)


def test_one_form_is_one_id_on_every_rank_and_a_traces_ids_grow_with_it():
    a, b = traces({0: dump([entry(0, 1)], world=2), 1: dump([entry(0, 1)], world=2)}).values()
    start_analysis()
    assert signature_ids(a)[0] == signature_ids(b)[0]
    a.signatures.append(_sig("all_gather", 3))
    b.signatures.append(_sig("broadcast", 3))  # (broadcast's dtypes are not compared, its sizes are)
    (ia, table), (ib, _) = signature_ids(a), signature_ids(b)
    assert len(ia) == len(a.signatures) == 2 and ia[0] == ib[0] and ia[1] != ib[1]
    assert table is not None and bytes(range(2)).translate(table) == bytes(ia)


def _diagnosis_text(dumps) -> list[str]:
    d = analyze(list(traces(dumps).values()))
    return [f.message for f in d.findings] + [str(d.matched)]


def test_a_diagnosis_is_the_same_whatever_the_numbering_holds(monkeypatch):
    job = healthy_job(world=4, steps=12)
    job[2][7]["input_sizes"] = job[2][7]["output_sizes"] = [[8, 8]]  # a size mismatch to name
    dumps = {r: dump(es, world=4) for r, es in job.items()}
    fresh = _diagnosis_text(dumps)
    assert any("different tensor sizes" in m for m in fresh), fresh
    for n in range(300):  # ids past a byte: the columns are translated one by one
        ids_module._id(_sig("all_reduce", 1000 + n))
    assert _diagnosis_text(dumps) == fresh
    monkeypatch.setattr(ids_module, "MAX_IDS", 10)  # past its bound: numbered again before the next analysis
    generation = ids_module._generation
    assert _diagnosis_text(dumps) == fresh
    assert ids_module._generation == generation + 1 and len(ids_module._ids) <= 10


def test_a_trace_kept_across_a_new_numbering_is_numbered_again(monkeypatch):
    """A job view keeps most traces from pass to pass: one numbered before the numbering started again must
    not be compared by its old ids with a trace numbered after (the same op would read as a mismatch)."""
    job = healthy_job(world=2, steps=6)
    dumps = {r: dump(es, world=2) for r, es in job.items()}
    kept = traces(dumps)[0]
    monkeypatch.setattr(ids_module, "MAX_IDS", 40)
    for n in range(50):
        ids_module._id(_sig("all_reduce", 2000 + n))
    start_analysis()  # past the bound: an empty numbering
    for n in range(30):  # the kept trace's op numbered after these
        ids_module._id(_sig("all_reduce", 3000 + n))
    assert not analyze([kept, traces(dumps)[1]]).findings
    for n in range(20):
        ids_module._id(_sig("all_reduce", 4000 + n))
    assert not analyze([kept, traces(dumps)[1]]).findings  # a new numbering: the new trace's op is id 0
