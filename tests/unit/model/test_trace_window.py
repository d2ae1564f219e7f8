"""A trace moved along its window (model/trace_window.py) is the trace built from scratch.

Random sequences of snapshots of a rank, shaped the way the job-level view gets them: each pass
appends new entries, the ones from the oldest unfinished on come again as new objects (the peers'
cursor) with their states moved on, the window slides. Coalesced collectives, p2p ops and their end
markers, several groups, shapes that change, the odd call site, a recorder that changes how it
reports completion, and seq ids out of order all occur. After every pass the followed trace, and the
live analysis of ranks followed that way, must equal what a from-scratch build gives.
"""

from __future__ import annotations

import gc
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frexport.analysis.engine import Options, analyze
from frexport.config import Analysis
from frexport.live.diagnosis import LiveAnalysis
from frexport.model import rank_trace, window_rows
from frexport.model.call_site import Frame
from frexport.model.dump import Entry, ProcessGroupConfig, ProcessGroupStatus, RankDump
from frexport.model.rank_trace import RankTrace, build_rank_trace
from frexport.model.trace_window import TraceWindow
from tests.support.compiled import compiled_or_pure

SHAPES = [((4, 4),), ((8, 2),), ((16,),)]
GROUPS = [("0", "default_pg", 0), ("1", "tp", 1), ("2", "pp", 2)]


class Stream:
    """One rank's recorder as a sequence of snapshots."""

    def __init__(self, rng: random.Random, rank: int, world: int, tail: int, odd: bool) -> None:
        self.rng, self.rank, self.world, self.tail, self.odd = rng, rank, world, tail, odd
        self.entries: list[Entry] = []
        self.rid = 1000 + rank
        self.seq = {name: 0 for name, _, _ in GROUPS}
        self.p2p_seq = 0
        self.now = 10**12
        self.backend = rng.choice(["nccl", "nccl", "ucc"])  # (ucc: a hook's recorder, its ops known only issued)

    def entry(self, group, seq, op, is_p2p=False, p2p_seq=0, src=None, dst=None, state="scheduled"):
        name, desc, pg_id = group
        shape = self.rng.choice(SHAPES) if self.rng.random() < 0.2 else SHAPES[0]
        site = Frame("step", "train.py", self.rng.randrange(3)) if self.odd and self.rng.random() < 0.1 else None
        self.rid += 1
        self.now += 1000
        # NCCL timing, some of it a fraction of a microsecond
        duration = self.rng.choice([0.25, 1.2345678, 3e3]) if self.odd and self.rng.random() < 0.3 else None
        return Entry(self.rid, pg_id, name, desc, seq, p2p_seq, None, is_p2p, f"{self.backend}:{op}", self.backend,
                     op, src, dst, shape, shape, ("Float",), ("Float",), state, False, self.now, None, None,
                     duration, 60000, None, None, (), site)

    def step(self) -> RankDump:
        rng = self.rng
        for _ in range(rng.randrange(0, 12)):
            r = rng.random()
            group = rng.choice(GROUPS)
            if r < 0.55:
                name = group[0]
                coalesced = self.entries and rng.random() < 0.15
                if not coalesced:
                    self.seq[name] += 1
                if self.odd and rng.random() < 0.03:
                    self.seq[name] -= rng.randrange(1, 4)  # a recorder out of seq order
                # ("coalesced": NCCL's end of a coalesced collective group, a collective like the others)
                op = rng.choice(["all_reduce", "all_gather", "all_reduce", "coalesced"])
                self.entries.append(self.entry(group, self.seq[name], op))
            elif r < 0.85:
                self.p2p_seq += 1
                op = rng.choice(["send", "recv"])
                self.entries.append(self.entry(GROUPS[2], 0, op, True, self.p2p_seq,
                                               0 if op == "recv" else 1, 1 if op == "recv" else 0))
            else:
                self.entries.append(self.entry(GROUPS[2], 0, "coalesced", True, self.p2p_seq))
        if self.odd and rng.random() < 0.05:
            self.backend = rng.choice(["gloo", "nccl", "ucc"])  # (ucc's recorder is a hook's: ops retired at issue)
        # finish some unfinished entries; everything from the oldest unfinished on is sent again
        first = next((i for i, e in enumerate(self.entries) if not e.finished), len(self.entries))
        moved = []
        for e in self.entries[first:]:
            if not e.finished and rng.random() < 0.9:  # most ops finish within a pass
                e = e._replace(state="completed" if rng.random() < 0.9 else "started",
                               time_started_ns=self.now if self.odd and rng.random() < 0.5 else None,
                               # (once in a while a time past 64 bits, which the header's arrays cannot hold)
                               time_completed_ns=2**64 + self.now if self.odd and rng.random() < 0.02 else None)
            elif rng.random() < 0.1:
                e = e._replace(retired=True)
            moved.append(e._replace())  # a new object, as a new body's row is
        self.entries[first:] = moved
        # the view keeps the window and every older unfinished entry
        cut = max(0, len(self.entries) - self.tail - rng.randrange(0, 4))
        self.entries = [e for e in self.entries[:cut] if not e.finished] + self.entries[cut:]
        self.now += 5 * 10**9
        config = tuple(ProcessGroupConfig(name, desc, tuple(range(self.world)) if name == "0" else
                                          tuple(range(self.world))) for name, desc, _ in GROUPS)
        return RankDump(self.rank, f"peer:rank{self.rank}", "json", (2, 10), "2.10", None, config, (),
                        tuple(self.entries), dumped_at_ns=self.now)


def resolved(t: RankTrace) -> tuple:
    """A trace with its interning resolved: what the analysis can read of it."""
    groups = []
    for name, g in t.groups.items():
        p2p = [(op.seq, op.op, op.src, op.dst, t.signatures[op.sig], op.flags, op.created_ns, t.call_site(op.site))
               for op in g.p2p]
        groups.append((name, g.pg_desc, g.pg_id, list(g.seq), [t.signatures[i] for i in g.sig], list(g.flags),
                       list(g.created_ns), list(g.duration_us), [t.call_site(i) for i in g.site], p2p))
    return (t.rank, t.source, t.format, t.version_text, t.notes, t.dumped_at_ns, t.n_entries, t.pg_config,
            t.pg_status, t.first_created_ns, t.last_created_ns, t.last_event_ns, t.timeouts_ms, set(t.call_sites),
            groups)


@contextmanager
def appended_by(compiled: bool) -> Iterator[None]:
    """A followed trace's entries appended and its rows moved by the compiled helpers (model/_rows.c, as
    built by the dev setup), or by rank_trace's and window_rows' Python alone (an install without a
    compiler). build_rank_trace never uses the helpers: the tests below compare the two ways."""
    with compiled_or_pure(rank_trace, "_rows", compiled), compiled_or_pure(window_rows, "_rows", compiled):
        yield


@pytest.mark.parametrize("compiled", [True, False])
@given(st.integers(0, 2**32), st.integers(4, 40), st.booleans())
def test_a_followed_trace_is_the_trace_built_from_scratch(compiled, seed, tail, odd):
    stream = Stream(random.Random(seed), 0, 2, tail, odd)
    follower = TraceWindow(tail)
    for _ in range(25):
        dump = stream.step()
        with appended_by(compiled):
            followed = resolved(follower.update(dump))
        assert followed == resolved(build_rank_trace(dump, tail=tail))
        # the same entries re-stamped by a status read (a sidecar between two entries reads): a new
        # snapshot of the same tuple of entries, with its own time and status
        again = replace(dump, dumped_at_ns=dump.dumped_at_ns + 10**9, source="restamped",
                        pg_status=(ProcessGroupStatus(0, 7, 6, 5),))
        with appended_by(compiled):
            followed = resolved(follower.update(again))
        assert followed == resolved(build_rank_trace(again, tail=tail))


HOSTILE = {"seq past int64": {"collective_seq_id": 2**63}, "no creation time": {"time_created_ns": None},
           "created past int64": {"time_created_ns": -2**63 - 1}, "duration NaN": {"duration_ms": math.nan},
           "duration inf": {"duration_ms": math.inf}, "duration past int64": {"duration_ms": 1e16},
           "duration an int": {"duration_ms": 5}, "duration negative": {"duration_ms": -0.0015},
           "unhashable call site": {"call_site": ["train.py", 3]}, "unhashable group": {"pg_name": ["0"]},
           "state not a string": {"state": 3}, "p2p peers odd": {"is_p2p": True, "op": "send", "p2p_src": "x"},
           # not hostile: p2p ops a hook retired at issue (their flags are the helper's own work)
           "p2p retired at issue": {"is_p2p": True, "op": "send", "backend": "ucc", "retired": True}}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_compiled_appender_leaves_what_it_cannot_take_to_append_rows(value):
    """Values the helper's columns cannot hold, or that Python judges (an error it must raise the same):
    followed both ways, the same trace, marks and tables, or the same error."""
    p2p = value.get("is_p2p", False)
    outcomes = []
    for compiled, seed in [(c, s) for c in (True, False) for s in range(4)]:
        stream = Stream(random.Random(seed), 0, 2, 30, True)
        follower = TraceWindow(30)
        with appended_by(compiled):
            for i in range(10):
                dump = stream.step()
                if i == 6:  # among followed entries, not the first build's: the newest two collectives (or p2p ops)
                    entries = list(dump.entries)
                    for at in [j for j, e in enumerate(entries) if e.is_p2p == p2p and e.op != "coalesced"][-2:]:
                        entries[at] = entries[at]._replace(**value)
                    dump = replace(dump, entries=tuple(entries))
                try:
                    got: object = resolved(follower.update(dump))
                except (TypeError, ValueError, OverflowError) as exc:
                    got, follower = type(exc), TraceWindow(30)
                marks = follower._marks
                outcomes.append((got, marks.pg_name, bytes(marks.kind), bytes(marks.site), marks.merged,
                                 follower._index.sig_index, follower._index.site_index,
                                 {k: list(v) for k, v in follower._index.heads.items()}))
    half = len(outcomes) // 2
    assert outcomes[:half] == outcomes[half:]


def _entry(rid: int, state: str = "completed") -> Entry:
    return Entry(rid, 0, "0", "default_pg", 1, 0, None, False, "nccl:all_reduce", "nccl", "all_reduce", None,
                 None, (), (), (), (), state, False, 1, None, None, None, None, None, None, (), None)


@given(st.lists(st.sampled_from([1, 2, 3, 5, 8, 2**70, -1]), max_size=12), st.integers(0, 12),
       st.integers(0, 12), st.lists(st.sampled_from([1, 2, 3, 5, 8, 2**70, -1]), min_size=1, max_size=12))
def test_where_a_window_is_cut_is_the_same_compiled_or_not(old_ids, keep_from, keep, new_ids):
    """window_rows.window_cut, the first step of a follow, in C and in Python: how many entries left the
    window, how many are kept as they were, and a window whose new ids do not rise given up (None). Ids out
    of order, repeated or past 64 bits (the C leaves those to Python) occur."""
    old = tuple(map(_entry, sorted(old_ids)))
    new = old[keep_from:keep_from + keep] + tuple(map(_entry, new_ids))
    outcomes = []
    for compiled in (True, False):
        with compiled_or_pure(window_rows, "_rows", compiled):
            outcomes.append(window_rows.window_cut(new, old))
    assert outcomes[0] == outcomes[1]


@given(st.lists(st.integers(0, 30), max_size=20, unique=True), st.lists(st.integers(0, 40), min_size=1, max_size=12),
       st.sampled_from(["sorted", "as drawn", "past 64 bits"]), st.data())
def test_a_held_window_merged_with_what_was_sent_is_the_same_compiled_or_not(held_ids, sent_ids, order, data):
    """window_rows.merged_window, each rank's held window with what its peer sent from the cursor on, in C
    (the usual case: the sent ids rising, the held ones from the first of them on sent again) and in Python:
    the same entries in the same order, a held entry sent again unchanged kept as the held object."""
    held = tuple(map(_entry, sorted(held_ids)))
    sent_ids = sorted(set(sent_ids)) if order != "as drawn" else sent_ids
    if order == "past 64 bits":
        sent_ids = [*sent_ids, 2**70]
    by_id = {e.record_id: e for e in held}
    sent = tuple(by_id[i] if i in by_id and data.draw(st.booleans()) else
                 _entry(i, data.draw(st.sampled_from(["completed", "scheduled"]))) for i in sent_ids)
    outcomes = []
    for compiled in (True, False):
        with compiled_or_pure(window_rows, "_rows", compiled):
            window, lo = window_rows.merged_window(held, sent)
        outcomes.append((window, [id(e) for e in window], lo))
    assert outcomes[0] == outcomes[1]


def test_a_window_that_slides_is_followed_not_rebuilt():
    updates = rebuilds = 0
    for seed in range(10):
        stream, follower = Stream(random.Random(seed), 0, 2, 40, False), TraceWindow(40)
        for _ in range(25):
            follower.update(stream.step())
        updates, rebuilds = updates + 25, rebuilds + follower.rebuilds
    assert rebuilds < updates / 2, (rebuilds, updates)  # (coalesced groups at the front are rebuilt)


def test_a_followed_traces_p2p_ops_are_left_out_of_the_collectors_walks():
    """Each pass appends a rank's new p2p ops, which the trace keeps for its window: tracked, the young
    collection after a pass walked each (a third of what a 4096-rank view's pass left it)."""
    assert rank_trace._rows is not None, "frexport.model._rows is not built (scripts/setup.sh builds it)"
    stream, follower = Stream(random.Random(3), 0, 2, 40, False), TraceWindow(40)
    ops = []
    for _ in range(25):
        trace = follower.update(stream.step())
        ops += [op for g in trace.groups.values() for op in g.p2p]
    assert ops and not any(map(gc.is_tracked, ops)), sum(map(gc.is_tracked, ops))


@pytest.mark.parametrize("compiled", [True, False])
@given(st.integers(0, 2**32), st.booleans())
def test_the_live_analysis_of_followed_traces_is_the_analysis_from_scratch(compiled, seed, odd):
    world, tail = 3, 24
    rng = random.Random(seed)
    streams = [Stream(random.Random(rng.random()), r, world, tail, odd) for r in range(world)]
    live = LiveAnalysis(Analysis(window=tail, stall_after=30.0), scoped=False)
    for _ in range(12):
        dumps = {s.rank: s.step() for s in streams if rng.random() < 0.9 or s.rank not in live._traces}
        latest = {**{r: d for r, (d, _) in live._traces.items()}, **dumps}
        with appended_by(compiled):
            result = live.run(latest)
        scratch = analyze([build_rank_trace(d, tail=tail) for d in latest.values()],
                          options=Options(stall_after_s=30.0, clock=True,
                                          straggler_lateness_s=live.cfg.straggler_lateness))
        assert repr(result.diagnosis) == repr(scratch)
