"""One rank's trace kept in step with its sliding window, instead of rebuilt from every snapshot.

The job-level view gets a new snapshot of every rank on every pass (a busy job records new entries
everywhere), and building 4096 traces of 256 entries from scratch was most of a pass. Between two
snapshots of a rank the window slides: a few entries leave at the front, the ones from the peers'
cursor on are new or changed, the rest are the same `Entry` objects. `TraceWindow.update` takes the
rows of what left out of the columns and appends the rows of what is new, and gives exactly the
trace `build_rank_trace(dump, tail=...)` gives (tests/unit/model/test_trace_window.py checks it on
random sequences of snapshots). Where that is not cheap to do exactly it rebuilds: the first
snapshot, one with mostly other entry objects (a sidecar's own polls decode fresh entries), a
recorder that changed how it reports completion, entries or a group's columns out of order, a
coalesced group cut by the window's front, rows with call sites leaving (the trace lists every call
site of its window), interning tables grown well past the window.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter

from frexport.model.dump import Entry, RankDump
from frexport.model.rank_trace import (
    P2P,
    EdgeFacts,
    P2POp,
    RankTrace,
    RowIndex,
    RowMarks,
    append_entries,
    finish_group,
    new_trace,
    recent_p2p,
    restamp,
    set_header,
    window,
)
from frexport.model.window_rows import drop_rows, settle_groups, window_cut

_record_id = attrgetter("record_id")
_IS = [bytes(1 if v == kind else 0 for v in range(256)) for kind in range(4)]  # a kind column -> 1 where that kind


class TraceWindow:
    """The trace of one rank's window; `update` with each new snapshot of the rank."""

    def __init__(self, tail: int | None) -> None:
        self.tail = tail
        self.trace: RankTrace | None = None
        self.rebuilds = 0  # how often `update` built from scratch (tests, and the benchmark's curiosity)
        self._entries: list[Entry] = []  # the window's entries, in record order
        self._marks = RowMarks()  # what each entry's row became; row numbers from `_base`
        self._base = 0  # row number of _entries[0]: numbers grow for good, so marks never shift
        self._index = RowIndex()
        self._p2p: dict[str, list[P2POp]] = {}  # every p2p op per group (the trace keeps the recent ones)
        self._events: frozenset[str] = frozenset()
        self._followable = False  # the last build left columns in row order: it can be followed
        self._facts = EdgeFacts()  # the header's facts of every entry of the window (rank_trace.EdgeFacts)
        self._of: tuple[Entry, ...] | None = None  # the entries of the snapshot the trace was last updated to

    def update(self, dump: RankDump, rank: int | None = None) -> RankTrace:
        rank = dump.rank if rank is None else rank
        if rank is None:
            raise ValueError(f"{dump.source}: the rank of this dump is unknown")
        if self.trace is not None and self.trace.rank == rank and dump.entries is self._of:
            # the same entries, re-stamped (a sidecar's status read between two entries reads; an idle or
            # hung rank in the job view): the same rows and entry facts, only the snapshot's own fields
            # are new (windowing 2000 entries again was most of an idle sidecar's analysis)
            restamp(self.trace, dump)
            return self.trace
        entries = window(dump.entries, self.tail)
        if self.trace is None or self.trace.rank != rank or not self._follow(dump, entries):
            self._rebuild(dump, rank, entries)
        assert self.trace is not None  # (for mypy) _rebuild sets it
        self._of = dump.entries
        return self.trace

    # --- from scratch ----------------------------------------------------------------------------

    def _rebuild(self, dump: RankDump, rank: int, entries: tuple[Entry, ...]) -> None:
        self.rebuilds += 1
        self._facts = EdgeFacts.of(entries)
        header = self._facts.header()
        trace = new_trace(dump, rank, entries, header)
        self._index, self._marks, self._base = RowIndex(), RowMarks(), 0
        self._events = header.events
        append_entries(trace, entries, self._events, self._index, self._marks, 0)
        self._p2p = {name: g.p2p for name, g in trace.groups.items()}  # before finish_group keeps the recent
        sorted_out = [finish_group(g) for g in trace.groups.values()]
        rids = list(map(_record_id, entries))
        self._followable = not any(sorted_out) and all(map(int.__lt__, rids, rids[1:]))
        self._entries = list(entries)
        self.trace = trace

    # --- following the window --------------------------------------------------------------------

    def _follow(self, dump: RankDump, new: tuple[Entry, ...]) -> bool:
        """Move the trace to `new`; False where only a rebuild is exact (the caller rebuilds, so an
        update given up half way leaves nothing behind)."""
        old, trace = self._entries, self.trace
        if trace is None or not self._followable or not new:
            return False
        cut = window_cut(new, old)
        if cut is None:
            return False  # out of record order
        k, same = cut  # the first k entries left the window, the next `same` are kept as they were
        if same < len(new) // 2 or len(trace.signatures) > 2 * len(new) + 64:
            return False  # mostly other entries, or tables grown with what left: a rebuild costs as much
        b = k + same  # rows from b on are taken out, and the new ones appended
        base, marks = self._base, self._marks
        # coalesced ops (rare): (their position's row, their row)
        merged = [(head - base, n - base) for n, head in marks.merged.items()]
        if any(head < k <= i for head, i in merged):
            return False  # the front cuts a coalesced group: its first position would change
        while True:  # a coalesced group the cut at b splits is taken out whole
            heads = [head for head, i in merged if head < b <= i]
            if not heads:
                break
            b = min(heads)
        if 1 in marks.site[:k] or 1 in marks.site[b:]:
            return False  # the trace lists its window's call sites: one may have left
        added = new[b - k:]
        # from here on the window's lists are moved in place (copying them touched every entry of the
        # window, cold in a big view's cache); a follow given up from here on is rebuilt by the caller
        self._facts.slide(k, b, EdgeFacts.of(added))
        header = self._facts.header()
        if header.events != self._events:
            return False  # the recorder changed how it reports completion
        touched = self._drop(0, k, front=True) | self._drop(b, len(marks), front=False)
        marks.keep(k, b, base)
        self._base = base + k
        recent = {}
        for name, g in trace.groups.items():  # rows are appended to every p2p op, then the recent ones kept
            recent[name], g.p2p = g.p2p, self._p2p[name]
        n_kept = len(marks)
        columns_before = {name: len(g.seq) for name, g in trace.groups.items()}
        append_entries(trace, added, self._events, self._index, marks, self._base + n_kept)
        touched.update(compress(marks.pg_name[n_kept:], marks.kind[n_kept:].translate(_IS[P2P])))
        for name, g in trace.groups.items():
            if name not in recent:  # opened by the new rows
                self._p2p[name], recent[name] = g.p2p, []
                touched.add(name)
            g.p2p = recent_p2p(self._p2p[name]) if name in touched else recent[name]
        del old[b:], old[:k]
        old.extend(added)
        if not self._settle(columns_before):
            return False
        set_header(trace, dump, len(new), header)
        trace.rows_version += 1
        return True

    def _drop(self, lo: int, hi: int, front: bool) -> set[str]:
        """Take rows lo..hi-1 (by their marks) out of the columns: the first ones of each group, or the last.
        Returns the groups that lost p2p ops."""
        assert self.trace is not None  # (for mypy) only _follow drops rows, from a trace
        return drop_rows(self._marks.pg_name, self._marks.kind, lo, hi, front, self.trace.groups, self._index.heads,
                         self._p2p)

    def _settle(self, columns_before: dict[str, int]) -> bool:
        """Groups as a rebuild has them (window_rows.settle_groups). False where the appended rows left a group's
        columns out of seq order."""
        trace = self.trace
        assert trace is not None  # (for mypy) only _follow settles, a trace
        groups = settle_groups(trace.groups, self._marks.pg_name, self._marks.kind, self._entries, columns_before)
        if groups is None:
            return False
        for name in trace.groups.keys() - groups.keys():
            self._p2p.pop(name, None)
            self._index.heads.pop(name, None)
        trace.groups = groups
        return True
