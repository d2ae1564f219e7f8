"""A peer's body read the typed way (msgspec checks each row's columns in C) gives exactly what the
general way gives, row by row; it may only decline, and then the general way reads the body. So does a body
whose rows come as kinds (`rows=kinds`), which the general way reads as the whole rows they stand for.

The body is a real sidecar's (PeerApi over a LiveState of a job with p2p ops, NCCL timing, an
unfinished op and a second group); hostile values are put in random columns of random rows, and in
the rank and body fields (wrong types, values outside 64 bits, NaN and infinities, zero and negative
times, names over the bound, lists of other shapes). Both ways must agree on everything a view
reads: the peer's clock, every rank and its entries, what was dropped and why, the stall flag, or the
same DecodeError.
"""

import gc
import json
import pickle
import time
from dataclasses import replace
from multiprocessing.reduction import ForkingPickler

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from frexport.decode import peer_rows
from frexport.decode.errors import DecodeError
from frexport.decode.fields import MAX_NAME
from frexport.decode.normalize import normalize
from frexport.export.peer_api import PeerApi
from frexport.live.state import LiveState
from frexport.model.dump import Entry
from frexport.model.peer_rows import COLUMNS, KIND_COLUMNS, NUMBER_COLUMNS
from tests.support.examples import examples
from tests.support.synth import dump, entry, healthy_job

HOSTILE = [None, 0, -1, 7, 10 ** 400, -10 ** 400, 2 ** 63, -(2 ** 63) - 1, 2 ** 63 - 1, 1e308, -1e308,
           float("inf"), float("nan"), 0.5, -0.0, 1e16, 9e15, True, False, "", "x", "12", "x" * (MAX_NAME + 1),
           "completed", [], [[]], [[4]], [[4, "4"]], [[2 ** 70]], [[True]], [[4, 4]] * 3, ["Float", 5],
           ["Float"] * 3, {}, {"a": 1}, [[[4]]], [[70000]] * 2, [list(range(40000)), list(range(30000))]]
RANK_FIELDS = ("rank", "epoch", "dumped_at_ns", "world_size", "first", "full", "version", "comm_lib_version",
               "pg_status", "handlers", "entries", "pg_config")
BODY_FIELDS = ("format", "now_ns", "ranks", "stall_suspected")


def _job() -> dict[int, list[dict]]:
    job = healthy_job(world=2, steps=6)
    for r in range(2):
        job[r].append(entry(6, 0, op="send 0->1" if r == 0 else "recv 0<-1", pg=("1", "pp"), pg_id=1,
                            is_p2p=True, p2p_seq=1, duration_ms=None))
        job[r].append(entry(7, 7, state="scheduled", duration_ms=None, sizes=((8, 2), (3,)), dtype="BFloat16"))
    return job


def _sidecar() -> PeerApi:
    state, now = LiveState(), time.time_ns()
    for r, es in _job().items():
        state.ingest(normalize(dump(es, world=2, groups={"1": ("pp", [0, 1])}), f"rank {r}", "pickle", rank=r,
                               dumped_at_ns=now, keep_frames=False), "test", now)
    return PeerApi(state, 256)


SIDECAR = _sidecar()
BODY = json.loads(SIDECAR.ranks_body({}, runs=True))
KINDS_BODY = json.loads(SIDECAR.ranks_body({}, runs=True, kinds=True))  # (rows=kinds: model/peer_rows.py)


def _general(body: bytes, max_ranks: int):
    saved = peer_rows._typed_body
    peer_rows._typed_body = lambda _body, _max: None
    try:
        return _outcome(body, max_ranks)
    finally:
        peer_rows._typed_body = saved


def _outcome(body: bytes, max_ranks: int):
    try:
        return peer_rows.parse_body(body, "peer", {}, max_ranks)
    except DecodeError as exc:
        return ("error", exc.reason, exc.detail)


def test_a_real_sidecars_body_is_read_the_typed_way_and_as_the_general_way_reads_it():
    body = json.dumps(BODY).encode()
    assert peer_rows._typed_body(body, 10) is not None  # (else the property below would compare one way twice)
    typed = _outcome(body, 10)
    assert typed == _general(body, 10)
    _now, ranks, dropped, _suspected = typed
    assert [len(r.entries) for r in ranks] == [8, 8] and dropped.rows == 0
    assert {e.duration_ms for r in ranks for e in r.entries} == {1.0, None}  # (timed and untimed rows were read)


_row_edits = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 7), st.integers(0, len(COLUMNS) - 1),
                                st.integers(0, len(HOSTILE) - 1)), max_size=4)
_rank_edits = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(RANK_FIELDS + ("(drop)",)),
                                 st.integers(0, len(HOSTILE) - 1)), max_size=2)
_body_edits = st.lists(st.tuples(st.sampled_from(BODY_FIELDS), st.integers(0, len(HOSTILE) - 1)), max_size=1)


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_row_edits, _rank_edits, _body_edits, st.sampled_from([1, 2, 10]))
@example([(0, 7, COLUMNS.index("time_started_ns"), HOSTILE.index(0))], [], [], 10)  # 0: not yet started
@example([(1, 0, COLUMNS.index("duration_ms"), HOSTILE.index(1e16))], [], [], 10)  # past the bound: unknown
@example([(1, 0, COLUMNS.index("duration_ms"), HOSTILE.index(7))], [], [], 10)  # an integer duration
@example([(0, 1, COLUMNS.index("input_sizes"), len(HOSTILE) - 1)], [], [], 10)  # over the dimensions' bound
@example([(0, 2, COLUMNS.index("thread_id"), HOSTILE.index("x" * (MAX_NAME + 1)))], [], [], 10)  # blanked, kept
def test_the_typed_way_declines_or_reads_as_the_general_way(row_edits, rank_edits, body_edits, max_ranks):
    doc = json.loads(json.dumps(BODY))
    for r, i, column, value in row_edits:
        doc["ranks"][r]["entries"][i][column] = HOSTILE[value]
    for r, field, value in rank_edits:
        if field == "(drop)":
            doc["ranks"][r].pop("rank", None)
        else:
            doc["ranks"][r][field] = HOSTILE[value]
    for field, value in body_edits:
        doc[field] = HOSTILE[value]
    body = json.dumps(doc).encode()  # (Python writes NaN and Infinity: not strict JSON, the general way's)
    assert _outcome(body, max_ranks) == _general(body, max_ranks)


@pytest.mark.parametrize("column", ["time_started_ns", "time_completed_ns"])
def test_a_discovery_time_of_zero_is_unknown_both_ways(column):
    doc = json.loads(json.dumps(BODY))
    doc["ranks"][0]["entries"][0][COLUMNS.index(column)] = 0
    body = json.dumps(doc).encode()
    assert peer_rows._typed_body(body, 10) is not None
    _now, ranks, _dropped, _suspected = _outcome(body, 10)
    assert getattr(ranks[0].entries[0], column) is None


def test_rows_read_the_typed_way_share_their_names_and_shapes():
    """One object per distinct name, dtype list and size list in a body: a 16384-rank view holds ~4
    million entries, and the decoders pickle each shared object once per body, not once per row (the
    trace builder also keys signatures by the shapes' identity)."""
    _now, ranks, _dropped, _suspected = _outcome(json.dumps(BODY).encode(), 10)
    rows = [e for r in ranks for e in r.entries if not e.is_p2p and e.input_dtypes == ("Float",)]
    assert len(rows) == 12
    for field in ("pg_name", "pg_desc", "profiling_name", "backend", "op", "state", "thread_name", "input_dtypes",
                  "input_sizes"):
        assert len({id(getattr(e, field)) for e in rows}) == 1, field


def test_ranks_cross_from_the_decoders_to_the_view_as_they_were_read():
    """The decoders pickle what they read to the view (entries as columns): the same ranks come out,
    their entries Entry objects, each distinct name and shape still one object; a rank without entries too."""
    _now, ranks, _dropped, _suspected = _outcome(json.dumps(BODY).encode(), 10)
    ranks.append(replace(ranks[0], rank=5, entries=()))
    back = pickle.loads(ForkingPickler.dumps(ranks))
    assert back == ranks and back[2].entries == ()
    assert {type(e) for r in back for e in r.entries} == {Entry}
    for field in ("pg_name", "state", "input_dtypes", "input_sizes"):
        values = {getattr(e, field) for r in ranks for e in r.entries}
        assert len({id(getattr(e, field)) for r in back for e in r.entries}) == len(values), field


def test_a_sidecar_asked_for_kinds_sends_less_and_the_view_reads_the_same_ranks():
    """A view asks for rows as kinds; a pod of an older frexport ignores the parameter and sends whole rows:
    both read as the same ranks, entry for entry."""
    status, kinds, _ = SIDECAR.handle("/api/v1/ranks", "members=runs&rows=kinds")
    _, whole, _ = SIDECAR.handle("/api/v1/ranks", "members=runs")
    assert status == 200 and len(kinds) < 0.75 * len(whole)
    assert all(len(r["kinds"]) < len(r["entries"]) for r in json.loads(kinds)["ranks"])
    assert peer_rows._typed_body(kinds, 10) is not None
    (_, ranks, dropped, _), (_, expected, _, _) = _outcome(kinds, 10), _outcome(whole, 10)
    assert ranks == expected and dropped.rows == 0 and [len(r.entries) for r in ranks] == [8, 8]
    assert {type(e) for r in ranks for e in r.entries} == {Entry}


_K, _R = len(KIND_COLUMNS), len(NUMBER_COLUMNS) + 1
_kind_edits = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, _K - 1),
                                 st.integers(0, len(HOSTILE) - 1)), max_size=3)
_short_edits = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 7), st.integers(0, _R),
                                  st.integers(0, len(HOSTILE) - 1)), max_size=3)


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_kind_edits, _short_edits, st.sampled_from([None, 0, 1, 2]), st.sampled_from([1, 2, 10]))
@example([], [(0, 3, 0, HOSTILE.index(7))], None, 10)  # a row naming a kind the rank did not send
@example([], [(1, 2, 0, HOSTILE.index(-1))], None, 10)  # a negative kind
@example([], [(0, 1, 0, HOSTILE.index(True))], None, 10)  # a boolean is no kind
@example([], [(0, 4, _R, HOSTILE.index(0))], None, 10)  # a row one column too long
@example([(0, 0, KIND_COLUMNS.index("input_sizes"), len(HOSTILE) - 1)], [], None, 10)  # a kind over the bound
@example([], [(0, 0, 1 + NUMBER_COLUMNS.index("time_started_ns"), HOSTILE.index(0))], None, 10)  # not yet
@example([], [(1, 1, 1 + NUMBER_COLUMNS.index("duration_ms"), HOSTILE.index(1e16))], None, 10)  # past the bound
@example([], [(1, 1, 1 + NUMBER_COLUMNS.index("duration_ms"), HOSTILE.index(7))], None, 10)  # an integer one
@example([], [], 1, 10)  # "kinds" not a list
def test_rows_sent_as_kinds_are_read_the_typed_way_as_the_general_way_reads_them(kind_edits, short_edits,
                                                                                  kinds_value, max_ranks):
    doc = json.loads(json.dumps(KINDS_BODY))
    for r, k, column, value in kind_edits:
        kinds = doc["ranks"][r]["kinds"]
        kinds[k % len(kinds)][column] = HOSTILE[value]
    for r, i, column, value in short_edits:
        row = doc["ranks"][r]["entries"][i]
        if column < len(row):
            row[column] = HOSTILE[value]
        else:
            row.append(HOSTILE[value])
    if kinds_value is not None:
        doc["ranks"][0]["kinds"] = HOSTILE[kinds_value]
    body = json.dumps(doc).encode()
    assert _outcome(body, max_ranks) == _general(body, max_ranks)


@pytest.mark.parametrize("kind", [7, -1, True, "0", None, 0.0])
def test_a_row_naming_no_kind_is_dropped_and_counted_the_others_read(kind):
    doc = json.loads(json.dumps(KINDS_BODY))
    doc["ranks"][0]["entries"][3][0] = kind
    _now, ranks, dropped, _suspected = _outcome(json.dumps(doc).encode(), 10)
    assert dropped.rows == 1 and [len(r.entries) for r in ranks] == [7, 8]
    assert [e.record_id for e in ranks[0].entries] == [0, 1, 2, 4, 5, 6, 7]


def test_ranks_read_from_kinds_cross_from_the_decoders_to_the_view_as_they_were_read():
    """The decoders hand the view a rank read from kinds as its templates and numbers: the same entries come
    out, untracked, each name and shape one object; a rank whose entries were replaced since crosses with its own."""
    _now, ranks, _dropped, _suspected = _outcome(json.dumps(KINDS_BODY).encode(), 10)
    _now, whole, _dropped, _suspected = _outcome(json.dumps(BODY).encode(), 10)
    assert all(r.kinds is not None for r in ranks)
    assert len(ForkingPickler.dumps(ranks)) < len(ForkingPickler.dumps(whole))  # (what the view reads, less)
    ranks += [replace(ranks[0], rank=5, entries=()), replace(ranks[1], rank=6, entries=ranks[1].entries[2:4])]
    back = pickle.loads(ForkingPickler.dumps(ranks))
    assert back == ranks and [len(r.entries) for r in back] == [8, 8, 0, 2]
    assert {type(e) for r in back for e in r.entries} == {Entry} and all(r.kinds is None for r in back)
    assert not any(gc.is_tracked(e) for r in back for e in (r.entries, *r.entries))
    for field in ("pg_name", "state", "thread_id", "input_dtypes", "input_sizes"):
        values = {getattr(e, field) for r in ranks for e in r.entries}
        assert len({id(getattr(e, field)) for r in back for e in r.entries}) == len(values), field


def test_a_rank_whose_rows_cannot_be_grouped_by_kind_is_sent_whole():
    """A value no kind can be keyed by (a list: normalize never makes one, so the state is filled by hand
    here) sends that rank's rows whole instead of failing the answer, and the view reads them."""
    state, now = LiveState(), time.time_ns()
    d = normalize(dump(_job()[0], world=2), "rank 0", "pickle", rank=0, dumped_at_ns=now, keep_frames=False)
    state.ingest(replace(d, entries=(d.entries[0]._replace(input_sizes=[[4, 4]]), *d.entries[1:])), "test", now)
    _, body, _ = PeerApi(state, 256).handle("/api/v1/ranks", "rows=kinds")
    assert "kinds" not in json.loads(body)["ranks"][0]
    _now, (rank,), dropped, _suspected = _outcome(body, 10)
    assert dropped.rows == 0 and rank.entries[0].input_sizes == ((4, 4),) and len(rank.entries) == len(d.entries)
