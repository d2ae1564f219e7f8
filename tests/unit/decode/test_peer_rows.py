"""A peer's /api/v1/ranks body: a pg_status row is (pg_id, enqueued, started, completed), and pg_id
is a number, as in every local dump (found by mypy: a null pg_id used to be taken as it came). A bad
row is dropped, never the peer's every rank (issue 28: a hostile value drops that value)."""

import json

import pytest

from frexport.decode.peer_rows import parse_body
from frexport.model.dump import ProcessGroupStatus
from frexport.model.peer_rows import FORMAT


def _body(pg_status) -> bytes:
    rank = {"rank": 0, "epoch": 1, "full": True, "pg_status": pg_status, "entries": []}
    return json.dumps({"format": FORMAT, "now_ns": 5, "ranks": [rank]}).encode()


def test_pg_status_rows_keep_their_unknown_counters():
    now_ns, (rank,), _dropped, _suspected = parse_body(_body([[0, 3, None, 2]]), "peer")
    assert now_ns == 5 and rank.pg_status == (ProcessGroupStatus(0, 3, None, 2),)


# 2**64: an integer outside 64 bits used to become a None pg_id too (found by mypy)
@pytest.mark.parametrize("row", [[None, 3, 2, 2], ["0", 3, 2, 2], [2**64, 3, 2, 2], [], [0, 1, 2], 7])
def test_a_pg_status_row_without_an_integer_pg_id_or_of_another_shape_is_dropped(row):
    _now, (rank,), _dropped, _suspected = parse_body(_body([row, [1, 3, 2, 2]]), "peer")
    assert rank.pg_status == (ProcessGroupStatus(1, 3, 2, 2),)


@pytest.mark.parametrize("flag,suspected", [(True, True), (False, False), (None, False), (1, False), ("true", False)])
def test_a_peer_suspects_a_stall_only_when_it_says_true(flag, suspected):
    """The pod's sidecar says whether its status reads suspect a stall (the view then analyses often);
    anything but JSON true is not a suspicion, and never drops the body."""
    doc = json.loads(_body([]))
    if flag is not None:
        doc["stall_suspected"] = flag
    _now, ranks, _dropped, said = parse_body(json.dumps(doc).encode(), "peer")
    assert said is suspected and len(ranks) == 1
