"""The p2p ops a trace keeps of its window (rank_trace.recent_p2p): every op still pending, and the last
`keep` of each (op, src, dst), in order: enough to judge the frontier, small to ship. Held to that rule
with model/_rows.c's loop and without it, on random ops (peer pairs repeated, finished or not, a few or
many of them, peers past 64 bits)."""

import random

import pytest

from frexport.model import rank_trace
from frexport.model.rank_trace import FINISHED, ISSUED, P2POp, recent_p2p
from tests.support.compiled import compiled_or_pure


def _rule(ops: list[P2POp], keep: int) -> list[P2POp]:
    later: dict[tuple, int] = {}  # (op, src, dst) -> ops of it after this one
    kept = []
    for op in reversed(ops):
        key = (op.op, op.src, op.dst)
        if later.get(key, 0) < keep or not op.flags & FINISHED:
            kept.append(op)
        later[key] = later.get(key, 0) + 1
    return kept[::-1]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_pending_ops_and_the_last_few_of_each_peer_pair_are_kept_in_order(compiled):
    rng = random.Random(29)
    with compiled_or_pure(rank_trace, "_rows", compiled):
        for _ in range(1000):
            odd = rng.random() < 0.1  # (a peer no decoder makes: the Python loop decides)
            # many peers now and then (more than the compiled loop keeps apart); one op name as two objects
            peers = [1, 2] if rng.random() < 0.8 else list(range(rng.randint(10, 40)))
            names = ["send", "recv", "".join(["se", "nd"])]
            ops = [P2POp(seq, rng.choice(names), rng.choice([0, 1, None, 2 ** 70] + ["1", 1.0] * odd),
                         rng.choice(peers), 0, rng.choice([0, FINISHED, FINISHED | ISSUED, ISSUED]), seq * 10, -1)
                   for seq in range(rng.randint(0, 80))]
            keep = rng.choice([0, 1, 3, 8])
            got = recent_p2p(ops, keep)
            assert got == _rule(ops, keep), (ops, keep)
            assert all(a is b for a, b in zip(got, [op for op in ops if op in got]))
