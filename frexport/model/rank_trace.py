"""The analysis view of one rank: per process group, columns indexed by sequence id.

Built from a `RankDump` (in a decode worker for `frexport analyze`, in-process
for the sidecar) so the cross-rank matcher works on small integer columns
instead of millions of entry objects: a worker ships a few arrays per group,
and equal runs of collectives compare as one bytes comparison.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import import_module
from itertools import compress, count, groupby, islice, repeat
from operator import attrgetter, eq, ge, is_not, itemgetter, ne
from types import ModuleType
from typing import Any, NamedTuple

from frexport.model.call_site import Frame
from frexport.model.dump import Entry, RankDump
from frexport.model.outcome import COMPLETED as STATE_COMPLETED
from frexport.model.outcome import (
    SAMPLE,
    Outcome,
    classify,
    edges,
    event_backends,
    first_unsettled,
    recorder_of,
    shows_events,
)
from frexport.model.outcome import SCHEDULED as STATE_SCHEDULED
from frexport.model.outcome import STARTED as STATE_STARTED
from frexport.model.signature import OpSignature, Signature
from frexport.model.untrack import untrack_plain

_new_tuple = tuple.__new__

# Per-collective flags: a compact encoding of model/outcome.py's Outcome for the integer columns.
FINISHED = 1  # nobody waits in it: Outcome.done, or an op only known issued that the rank issued past
COMPLETED = 2
RETIRED = 4
STARTED = 8
TIMED_OUT = 16  # Outcome.TIMED_OUT
# Outcome.ISSUED: a hook retired it at issue. The newest such op of a group is the rank's frontier, where
# it may wait (nothing says whether it finished); an older one it issued past is FINISHED as well, which
# says only that the rank moved on, never that the op completed (the analysis tells the two apart).
ISSUED = 32

_OUTCOME_FLAGS = {Outcome.PENDING: 0, Outcome.COMPLETED: COMPLETED | FINISHED, Outcome.RETIRED: FINISHED,
                  Outcome.TIMED_OUT: TIMED_OUT, Outcome.ISSUED: ISSUED}


def outcome_flags(state: str, retired: bool | None, backend: str, events: frozenset[str]) -> int:
    """The flags of an entry (before its start time and its group's frontier are looked at)."""
    return (_OUTCOME_FLAGS[classify(state, retired, recorder_of(backend, events))] | (RETIRED if retired else 0)
            | (STARTED if state == STATE_STARTED else 0))


@dataclass
class GroupTrace:
    """One rank's collectives in one process group, ordered by collective_seq_id."""

    pg_name: str
    pg_desc: str
    pg_id: int
    seq: array = field(default_factory=lambda: array("q"))
    sig: array = field(default_factory=lambda: array("i"))  # index into RankTrace.signatures
    flags: array = field(default_factory=lambda: array("B"))
    created_ns: array = field(default_factory=lambda: array("q"))
    duration_us: array = field(default_factory=lambda: array("q"))  # -1: unknown (only NCCL with timing has it)
    site: array = field(default_factory=lambda: array("i"))  # index into RankTrace.call_sites, -1: none
    p2p: list[P2POp] = field(default_factory=list)

    @property
    def first_seq(self) -> int:
        return self.seq[0]

    @property
    def last_seq(self) -> int:
        return self.seq[-1]

    def contiguous(self) -> bool:
        return not self.seq or self.seq[-1] - self.seq[0] + 1 == len(self.seq)

    def position(self, seq_id: int) -> int | None:
        """Index of `seq_id` in the columns (O(1) when contiguous, else a binary search)."""
        if not self.seq:
            return None
        i = seq_id - self.seq[0]
        if 0 <= i < len(self.seq) and self.seq[i] == seq_id:
            return i
        lo, hi = 0, len(self.seq)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.seq[mid] < seq_id:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self.seq) and self.seq[lo] == seq_id else None


class P2POp(NamedTuple):
    """A send or recv; peers are group-local ranks, as PyTorch names them ("send 0->1")."""

    seq: int  # p2p_seq_id
    op: str
    src: int | None
    dst: int | None
    sig: int
    flags: int
    created_ns: int
    site: int


@dataclass
class RankTrace:
    rank: int
    source: str
    format: str
    version_text: str | None
    notes: tuple[str, ...]
    dumped_at_ns: int | None
    n_entries: int
    pg_config: tuple
    pg_status: tuple
    first_created_ns: int | None
    last_created_ns: int | None
    signatures: list[Signature] = field(default_factory=list)
    call_sites: list[Frame] = field(default_factory=list)
    groups: dict[str, GroupTrace] = field(default_factory=dict)  # by pg_name
    # The newest time this rank's recorder wrote (an entry created, or its start or completion
    # discovered): the rank was alive, and its dump not yet taken, at least until then.
    last_event_ns: int | None = None
    timeouts_ms: dict[str, int] = field(default_factory=dict)  # pg_name -> the group's timeout_ms
    dumped_at_is_clock: bool = True  # RankDump.dumped_at_is_clock: a live analysis may time waits by it
    # how often its rows changed in place (model/trace_window.py follows a window): with the trace's
    # identity, what a live analysis judged of it before still holds (analysis/lateness.StragglerMemo)
    rows_version: int = 0
    # (generation, canonical ids of `signatures`, their byte table or None): analysis/signature_ids.py's, kept
    # with the trace because its signatures only grow
    signature_ids: tuple[int, list[int], bytes | None] | None = field(default=None, compare=False, repr=False)

    @property
    def dump_time_trusted(self) -> bool:
        """A dump time (a poll, a file's mtime) older than the rank's own newest recorded event is not
        when the dump was taken (a copied or touched file): the recorder's own times are used instead."""
        d, last = self.dumped_at_ns, self.last_event_ns or self.last_created_ns
        return bool(d and (not last or d >= last))

    @property
    def seen_at_ns(self) -> int | None:
        """When this rank was last known alive and recording: the dump time where it can be trusted,
        else its newest entry."""
        return self.dumped_at_ns if self.dump_time_trusted else self.last_created_ns

    @property
    def seen_by(self) -> str:
        """What `seen_at_ns` is, for reports that give a duration: say what it was measured against."""
        return "dump time" if self.dump_time_trusted else "newest recorded entry"

    def call_site(self, index: int) -> Frame | None:
        return self.call_sites[index] if index >= 0 else None


def build_rank_trace(dump: RankDump, rank: int | None = None, tail: int | None = None) -> RankTrace:
    """`tail` keeps only the newest entries (and every unfinished one): the live analysis looks at
    what is happening now; the history was judged in earlier passes."""
    rank = dump.rank if rank is None else rank
    if rank is None:
        raise ValueError(f"{dump.source}: the rank of this dump is unknown")
    entries = window(dump.entries, tail)
    trace = new_trace(dump, rank, entries)
    add_rows(trace, entry_rows(entries), event_backends(entries))
    return trace


def window(entries: tuple[Entry, ...], tail: int | None) -> tuple[Entry, ...]:
    """The newest `tail` entries and every older unfinished one (all of them without a tail)."""
    if tail is not None and len(entries) > tail:
        cut = len(entries) - tail
        first = first_unsettled(entries, 0, cut)  # the older unfinished entries stay (Entry.finished, inlined)
        older = () if first is None else \
            tuple(e for e in entries[first:cut] if e.state != STATE_COMPLETED and not e.retired)
        entries = older + entries[cut:]
    return entries


def new_trace(dump: RankDump, rank: int, entries: tuple[Entry, ...], header: EdgeHeader | None = None) -> RankTrace:
    """A trace of these entries with no rows yet (`header`: what their edge facts say, where the caller
    holds them)."""
    trace = RankTrace(
        rank=rank, source=dump.source, format=dump.format, version_text=dump.version_text, notes=dump.notes,
        dumped_at_ns=dump.dumped_at_ns, n_entries=0, pg_config=dump.pg_config, pg_status=dump.pg_status,
        first_created_ns=None, last_created_ns=None)
    set_header(trace, dump, len(entries), header if header is not None else EdgeFacts.of(edges(entries)).header())
    return trace


def _numbers() -> array:
    return array("q")


@dataclass
class EdgeFacts:
    """What a trace's header reads of entries, as columns (times and timeouts 0 where absent; `events`:
    the backend where the entry shows events, outcome.shows_events, else None). A trace that follows
    its window keeps them for the whole window and slices them as it slides: the header reads the
    sample (outcome.edges) of these, never the sampled entries themselves (in a 16384-rank view,
    touching 128 entries of every rank a pass was a third of following its trace)."""

    # The numbers as array('q') where they fit 64 bits (_rows.edge_facts makes them so), read in place by
    # _rows.edge_header: as lists of the entries' own int objects, the header's 128 entries a pass were
    # ~500 objects scattered in memory (18 of a followed trace's 60 µs at 2048 ranks, 2.5 as arrays). Lists
    # where one does not fit (then for as long as the window holds it).
    pg_name: list[str] = field(default_factory=list)
    created: list[int] | array = field(default_factory=_numbers)
    started: list[int] | array = field(default_factory=_numbers)
    completed: list[int] | array = field(default_factory=_numbers)
    timeout: list[int] | array = field(default_factory=_numbers)
    events: list[str | None] = field(default_factory=list)

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> EdgeFacts:
        if _rows is not None:  # (a followed trace makes these of its new entries every pass)
            cols = _rows.edge_facts(entries, *_EDGE_FIELDS, STATE_SCHEDULED)
            if cols is not NotImplemented:
                return cls(*cols)
        return cls(list(map(_pg_name, entries)), [v or 0 for v in map(_created, entries)],
                   [v or 0 for v in map(_started, entries)], [v or 0 for v in map(_completed, entries)],
                   [v or 0 for v in map(_timeout, entries)],
                   [e.backend if shows_events(e.state) else None for e in entries])

    def slide(self, k: int, b: int, added: EdgeFacts) -> None:
        """In place, to `self[k:b] + added`."""
        if type(added.created) is list and type(self.created) is not list:  # (a number past 64 bits came)
            self.created, self.started, self.completed, self.timeout = \
                list(self.created), list(self.started), list(self.completed), list(self.timeout)
        slide_columns(self._columns(), k, b, added._columns())

    def _columns(self) -> tuple[Any, ...]:  # (in the fields' order; lists and arrays)
        return self.pg_name, self.created, self.started, self.completed, self.timeout, self.events

    def sample(self) -> EdgeFacts:
        """Those of outcome.edges' entries."""
        n = len(self.created)
        return self if n <= 2 * SAMPLE else EdgeFacts(*[col[:SAMPLE] + col[n - SAMPLE:] for col in self._columns()])

    def event_backends(self) -> frozenset[str]:
        """outcome.event_backends of the entries these are the sample of."""
        return frozenset(self.events).difference((None,))  # type: ignore[return-value]  # ("" is a backend)

    def header(self) -> EdgeHeader:
        """What a trace's header says of the entries of its sample (entries in record order): in one
        loop of model/_rows.c where it is built (a followed trace reads it every pass: the sample's six
        lists and the passes over them were a tenth of a 4096-rank view's steady analysis), else as
        recorder_times, which every other way to a trace calls."""
        if _rows is not None:
            out = _rows.edge_header(*self._columns(), SAMPLE)
            if out is not NotImplemented:  # (a value not of its kind: the passes below decide)
                return EdgeHeader(*out)
        s = self.sample()
        present = list(filter(None, s.created))
        return EdgeHeader(min(present, default=None), max(present, default=None),
                          *edge_times(s.pg_name, s.created, s.started, s.completed, s.timeout), s.event_backends())


def leading_same(new: Sequence, old: Sequence, k: int) -> int:
    """How many leading items of `new` are the very objects old[k], old[k + 1], ... (a followed window's
    kept entries): pointers compared in model/_rows.c where it is built."""
    if _rows is not None:
        n = _rows.leading_same(new, old, k)
        if n is not NotImplemented:
            return n
    return next(compress(count(), map(is_not, new, islice(old, k, None))), max(0, min(len(new), len(old) - k)))


def slide_columns(columns: tuple, k: int, b: int, added: tuple | None = None) -> None:
    """Each column (a list or bytearray) in place to column[k:b] + added[i]: a followed window's columns moved
    with it (in model/_rows.c where it is built: a followed trace moves nine a pass)."""
    if _rows is not None:
        _rows.slide(columns, k, b, added)
        return
    for i, col in enumerate(columns):
        del col[b:], col[:k]
        if added is not None:
            col.extend(added[i])


class EdgeHeader(NamedTuple):
    first_created_ns: int | None
    last_created_ns: int | None
    last_event_ns: int | None
    timeouts_ms: dict[str, int]
    events: frozenset[str]  # outcome.event_backends of the sampled entries


def set_header(trace: RankTrace, dump: RankDump, n_entries: int, header: EdgeHeader) -> None:
    """What a trace says of its dump as a whole (everything but the rows)."""
    restamp(trace, dump)
    trace.n_entries = n_entries
    trace.first_created_ns, trace.last_created_ns, trace.last_event_ns, trace.timeouts_ms = header[:4]


def restamp(trace: RankTrace, dump: RankDump) -> None:
    """What a trace says of its dump that is not read from its entries: all that changes in a new snapshot
    of the same entries."""
    trace.source, trace.format, trace.version_text, trace.notes = dump.source, dump.format, dump.version_text, \
        dump.notes
    trace.dumped_at_ns, trace.pg_config, trace.pg_status = dump.dumped_at_ns, dump.pg_config, dump.pg_status
    trace.dumped_at_is_clock = dump.dumped_at_is_clock


_created, _started, _completed = attrgetter("time_created_ns"), attrgetter("time_started_ns"), \
    attrgetter("time_completed_ns")
_pg_name, _timeout = attrgetter("pg_name"), attrgetter("timeout_ms")


def entry_rows(entries: Sequence[Entry]) -> list:
    """One row per entry, as add_rows takes them."""
    one_sig: dict[tuple, Signature] = {}  # keyed by ids: the entries keep the shapes alive meanwhile
    rows = []
    for e in entries:
        # normalize interns shapes per dump, so identity stands for value here, and hashing ids is
        # much cheaper than hashing nested tuples (CPython does not cache tuple hashes)
        key = (e.op, id(e.input_sizes), id(e.output_sizes), id(e.input_dtypes), id(e.output_dtypes))
        sig = one_sig.get(key)
        if sig is None:
            sig = one_sig[key] = (OpSignature(e.op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes),)
        rows.append((e.pg_name, e.pg_desc, e.pg_id, e.is_p2p, e.collective_seq_id, e.p2p_seq_id,
                     (e.backend, e.op, e.p2p_src, e.p2p_dst), e.time_created_ns, e.duration_ms, sig,
                     e.call_site, e.state, e.retired, e.time_started_ns, e.time_completed_ns))
    return rows


def recorder_times(trace: RankTrace, pg_names: Sequence[str], created: Sequence[int], started: Sequence[int],
                   completed: Sequence[int], timeouts: Sequence[int | None]) -> None:
    """`last_event_ns` and `timeouts_ms` from the columns (pg_name, created, started, completed,
    timeout_ms; times 0 where absent) of the oldest and newest entries (outcome.edges): the newest events
    are among the newest entries, and a bounded sample keeps this O(1) on huge dumps. Every way to a
    trace calls this or EdgeFacts.header, so they agree."""
    trace.last_event_ns, found = edge_times(pg_names, created, started, completed, timeouts)
    trace.timeouts_ms.update(found)


def edge_times(pg_names: Sequence[str], created: Sequence[int], started: Sequence[int], completed: Sequence[int],
               timeouts: Sequence[int | None]) -> tuple[int | None, dict[str, int]]:
    """recorder_times' (newest event, timeouts): no timeout is left out, a group's last one wins."""
    newest = max(max(created, default=0), max(started, default=0), max(completed, default=0), 0) or None
    return newest, dict(compress(zip(pg_names, timeouts), timeouts))  # type: ignore[arg-type]


# A row, one per entry: (pg_name, pg_desc, pg_id, is_p2p, collective_seq_id, p2p_seq_id,
# (backend, op, p2p_src, p2p_dst), time_created_ns, duration_ms, signature, call_site, state,
# retired, time_started_ns or None, time_completed_ns or None). Both ways to a trace (from Entry
# objects here, from raw dumps in fast_trace) end in this one loop.
# Positions in a row of what fast_trace reads back; state, retired, started, completed are the last four.
ROW_PARSED, ROW_CREATED, ROW_STATE = 6, 7, 11

# What a row became (RowMarks.kind): nothing (a p2p coalesced end marker), a p2p op, a new position in
# its group's columns, or merged into the group's last position (another op of one coalesced group).
SKIPPED, P2P, COLUMN, MERGED = 0, 1, 2, 3


@dataclass
class RowMarks:
    """Where each row went, for a trace kept up to date row by row (model/trace_window.py). Columns, not
    an object per row: a 16384-rank view holds 4 million rows, which as tuples took ~100 bytes each and
    were most of what the collector walked after a first pass."""

    pg_name: list[str] = field(default_factory=list)
    kind: bytearray = field(default_factory=bytearray)
    site: bytearray = field(default_factory=bytearray)  # 1: it added a call site reference
    merged: dict[int, int] = field(default_factory=dict)  # row number of a MERGED row -> its position's row

    def add(self, pg_name: str, kind: int, site: bool) -> None:
        self.pg_name.append(pg_name)
        self.kind.append(kind)
        self.site.append(site)

    def __len__(self) -> int:
        return len(self.kind)

    def keep(self, k: int, b: int, base: int) -> None:
        """In place, to rows k..b-1 (`base`: the row number of the first row now)."""
        slide_columns((self.pg_name, self.kind, self.site), k, b)
        self.merged = {n: head for n, head in self.merged.items() if base + k <= n < base + b}


@dataclass
class RowIndex:
    """The interning tables of one trace's rows, kept between appends."""

    sig_index: dict = field(default_factory=dict)
    site_index: dict = field(default_factory=dict)
    heads: dict[str, array] = field(default_factory=dict)  # pg_name -> row number of each position


def add_rows(trace: RankTrace, rows: list, events: frozenset[str]) -> None:
    """`events`: the dump's `event_backends` (model/outcome.py)."""
    append_rows(trace, rows, events)
    for g in trace.groups.values():
        finish_group(g)


def finish_group(g: GroupTrace) -> bool:
    """Sort a group whose rows came out of seq order, keep its recent p2p ops; True: it was sorted."""
    unsorted = any(map(ge, g.seq, islice(g.seq, 1, None)))  # out of order: a wrapped or reset recorder
    if unsorted:
        _sort_group(g)
    settle_issued(g)
    g.p2p = recent_p2p(g.p2p)
    return unsorted


ISSUED_BYTE = bytes(1 if v & ISSUED else 0 for v in range(256))  # a flag column -> 1 where only issued
# 1 where the op is proven over (completed, or gloo's retired): not merely issued past (ISSUED)
PROVEN_DONE_BYTE = bytes(1 if v & FINISHED and not v & ISSUED else 0 for v in range(256))


def proven_done(flags: int) -> bool:
    """The op is proven over: FINISHED, and not an op only known issued that the rank went past."""
    return bool(PROVEN_DONE_BYTE[flags])


def settle_issued(g: GroupTrace) -> None:
    """An op known only to be issued (Outcome.ISSUED) is where the rank may wait only while it is the
    group's newest: the ones it issued past are FINISHED. Exact whatever was settled before (a trace
    that follows its window calls this again after each append)."""
    marks = g.flags.tobytes().translate(ISSUED_BYTE)
    last = len(marks) - 1
    i = marks.find(1)
    while 0 <= i < last:
        g.flags[i] |= FINISHED
        i = marks.find(1, i + 1)
    if last >= 0 and marks[last]:
        g.flags[last] &= ~FINISHED & 0xFF


# (state, retired, backend) -> outcome_flags, one table per recorder's `events` for every trace of the process:
# the flags are a function of those alone, and with a table per trace each of a 16384-rank view's traces
# took the row of an outcome it had not seen yet (a hang's first unfinished op) through Python, once each.
# Bounded: a peer or dump that varies its states or backends is computed row by row past the cap.
_KNOWN_OUTCOMES: dict[frozenset[str], dict[tuple[str, bool | None, str], int]] = {}
MAX_KNOWN_OUTCOMES = 1024


def known_outcomes(events: frozenset[str]) -> dict[tuple[str, bool | None, str], int]:
    known = _KNOWN_OUTCOMES.get(events)
    if known is None:
        if len(_KNOWN_OUTCOMES) >= 64:
            _KNOWN_OUTCOMES.clear()
        known = _KNOWN_OUTCOMES[events] = {}
    return known


def p2p_flags(flags: int) -> int:
    """A p2p op known only to be issued is FINISHED at once: a rank's p2p numbers count its ops with
    every peer, so no other rank's records show which one it lacks (and gloo records none to compare)."""
    return flags | FINISHED if flags & ISSUED else flags


def append_rows(trace: RankTrace, rows: list, events: frozenset[str], index: RowIndex | None = None,
                marks: RowMarks | None = None, first_row: int = 0) -> None:
    """Add rows at the end of the trace's columns. With `index` and `marks` (numbering rows from
    `first_row`) it can be called again with more rows: the way a trace follows a sliding window."""
    index = index or RowIndex()
    sig_index, site_index, heads = index.sig_index, index.site_index, index.heads
    known_flags = known_outcomes(events)
    groups = trace.groups
    signatures, call_sites = trace.signatures, trace.call_sites
    by_id: dict[int, int] = {}  # id of a signature object in `rows` (alive while they are) -> its index
    new_p2p: list[P2POp] = []  # (plain values, kept for the window: out of the collector's walks, as _rows.c's)
    n = first_row - 1
    for (pg_name, pg_desc, pg_id, is_p2p, seq, p2p_seq, (backend, op, src, dst), created, duration, sig,
         call_site, state, retired, started, _completed) in rows:
        n += 1
        if is_p2p and op == "coalesced":
            if marks is not None:
                marks.add(pg_name, SKIPPED, False)
            continue  # the end marker of a p2p coalesced group; its members are recorded individually
        g = groups.get(pg_name)
        if g is None:
            g = groups[pg_name] = GroupTrace(pg_name, pg_desc, pg_id)
        flags = known_flags.get((state, retired, backend))
        if flags is None:
            flags = outcome_flags(state, retired, backend, events)
            if len(known_flags) < MAX_KNOWN_OUTCOMES:
                known_flags[(state, retired, backend)] = flags
        if started:
            flags |= STARTED
        site = -1
        if call_site is not None:
            site = site_index.get(call_site, -1)
            if site < 0:
                site = site_index[call_site] = len(call_sites)
                call_sites.append(call_site)
        i = by_id.get(id(sig))  # rows of one entry object share their signature: hashing it again (CPython
        if i is None:           # caches no tuple hash) costs its every shape, per row
            i = sig_index.get(sig)
            if i is None:
                i = _intern(sig, sig_index, signatures)
            by_id[id(sig)] = i
        if is_p2p:
            p2p_op = _new_tuple(P2POp, (p2p_seq, op, src, dst, i, p2p_flags(flags), created, site))
            g.p2p.append(p2p_op)
            new_p2p.append(p2p_op)
            if marks is not None:
                marks.add(pg_name, P2P, site >= 0)
            continue
        gseq = g.seq
        if gseq and gseq[-1] == seq:  # another op of the same coalesced group
            k = len(gseq) - 1
            merged = signatures[g.sig[k]]
            # beyond either bound each merge would copy and hash the whole group again (quadratic)
            if len(merged) < MAX_COALESCED_OPS and _shapes(merged) + _shapes(sig) <= MAX_COALESCED_SHAPES:
                g.sig[k] = _intern(merged + sig, sig_index, signatures)
            g.flags[k] = _merge_flags(g.flags[k], flags)
            if g.site[k] < 0:
                g.site[k] = site
            if marks is not None:
                marks.merged[n] = heads[pg_name][-1]
                marks.add(pg_name, MERGED, site >= 0)
            continue
        gseq.append(seq)
        g.sig.append(i)
        g.flags.append(flags)
        g.created_ns.append(created)
        g.duration_us.append(-1 if duration is None else int(duration * 1000))
        g.site.append(site)
        if marks is not None:
            h = heads.get(pg_name)
            if h is None:
                h = heads[pg_name] = array("q")
            h.append(n)
            marks.add(pg_name, COLUMN, site >= 0)
    if new_p2p:
        untrack_plain(new_p2p)


def append_entries(trace: RankTrace, entries: tuple[Entry, ...], events: frozenset[str], index: RowIndex,
                   marks: RowMarks, first_row: int) -> None:
    """append_rows(trace, entry_rows(entries), events, index, marks, first_row), with the compiled helper
    (model/_rows.c, where it is built) taking every entry it can: it leaves to append_rows an entry that
    opens a group or an outcome's flags, a coalesced op's merge, or has values out of
    its columns' bounds (following 16384 traces a pass, the rows in Python were ~2.3 µs an entry)."""
    if _rows is None:
        append_rows(trace, entry_rows(entries), events, index, marks, first_row)
        return
    sigs: dict = {}  # (op, ids of its shapes) -> signature index: the entries keep the shapes alive meanwhile
    known = known_outcomes(events)
    i, n = 0, len(entries)
    while i < n:
        i = _rows.append(entries, i, first_row, trace.groups, known, index.site_index, trace.call_sites,
                         index.sig_index, trace.signatures, sigs, index.heads, marks.pg_name, marks.kind, marks.site)
        if i < n:
            append_rows(trace, entry_rows(entries[i:i + 1]), events, index, marks, first_row + i)
            i += 1


# The (rank, group) tails the analysis reads of every trace each pass, in model/_rows.c where it is built (three
# Python loops over every group of every rank were ~15 % of a job-level view's engine). Each answers
# NotImplemented without it, or for a value it leaves to its caller's Python loop (placement.py, diagnosis.py).

def compiled_passed_through(traces: list[RankTrace]) -> Any:
    """placement.passed_through's answer, or NotImplemented."""
    return NotImplemented if _rows is None else _rows.passed_through(traces, RankTrace, GroupTrace, PROVEN_DONE_BYTE)


def compiled_behind(ranks: list[int], traces: list[RankTrace], passed: dict[str, int]) -> Any:
    """placement.behind's answer, or NotImplemented."""
    return NotImplemented if _rows is None else _rows.behind(ranks, traces, RankTrace, GroupTrace, passed)


def compiled_passed_by_peers(traces: list[RankTrace], seen: list[int | None], stall_after_ns: int) -> Any:
    """The indices (in `traces`) of the ranks diagnosis._passed_by_peers names where nothing failed, or
    NotImplemented."""
    if _rows is None or not -2**63 <= stall_after_ns < 2**63:
        return NotImplemented
    return _rows.passed_by_peers(traces, seen, RankTrace, GroupTrace, PROVEN_DONE_BYTE, stall_after_ns)


def _load_rows() -> ModuleType | None:
    try:
        ext = import_module("frexport.model._rows")
    except ImportError:  # installed without a compiler: append_rows does it all
        return None
    ext.setup(tuple(Entry._fields.index(f) for f in _ROWS_FIELDS), OpSignature, P2POp, _new_tuple, STARTED, FINISHED,
              ISSUED, P2P, COLUMN, SKIPPED)
    return ext


# the Entry fields _rows.edge_facts reads, in its order
_EDGE_FIELDS = tuple(Entry._fields.index(f) for f in ("pg_name", "time_created_ns", "time_started_ns",
                                                       "time_completed_ns", "timeout_ms", "backend", "state"))
# the Entry fields _rows.c reads, in its order (its F_* constants)
_ROWS_FIELDS = ("pg_name", "is_p2p", "op", "collective_seq_id", "p2p_seq_id", "backend", "p2p_src", "p2p_dst",
                "time_created_ns", "duration_ms", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
                "call_site", "state", "retired", "time_started_ns")
_rows = _load_rows()


def add_columns(trace: RankTrace, kinds: list, which: Sequence[int], seqs: Sequence[int], p2p_seqs: Sequence[int],
                created: Sequence[int], started: Sequence[int], durations: Sequence[float],
                events: frozenset[str]) -> bool:
    """add_rows for entries given as columns: `kinds` are the distinct (pg_name, pg_desc, pg_id, is_p2p,
    (backend, op, src, dst), signature 1-tuple, call site, state, retired, ...) of the entries, in the order
    of each one's first entry (a kind added later must repeat an earlier kind's group, signature and
    call site); per entry its kind (`which`), collective and p2p sequence ids, time created, time
    started (0: unknown), duration in ms (NaN: unknown). The same trace as add_rows on the same entries
    as rows, built per group with C-level helpers instead of per entry; False (and the trace left
    untouched) where add_rows would merge the ops of a coalesced group, whose order of interning the
    merged signatures only a row by row pass reproduces."""
    n_kinds = len(kinds)
    # the entries of each (group, p2p or not), in order: a stable sort by bucket, then its runs
    bucket_of: list[int] = [-1] * n_kinds
    buckets: dict[tuple[str, bool], int] = {}
    for n, (pg_name, _desc, _pg_id, is_p2p, parsed, *_rest) in enumerate(kinds):
        if is_p2p and parsed[1] == "coalesced":
            continue  # the end marker of a p2p coalesced group, as in add_rows
        bucket_of[n] = buckets.setdefault((pg_name, is_p2p), len(buckets))
    entry_bucket = list(map(bucket_of.__getitem__, which))
    runs = {b: list(idx) for b, idx in groupby(sorted(range(len(entry_bucket)), key=entry_bucket.__getitem__),
                                                entry_bucket.__getitem__)}
    coll = {name: runs[b] for (name, is_p2p), b in buckets.items() if not is_p2p and b in runs}
    p2p = {name: runs[b] for (name, is_p2p), b in buckets.items() if is_p2p and b in runs}
    coll_seqs = {name: array("q", map(seqs.__getitem__, idx)) for name, idx in coll.items()}
    for s in coll_seqs.values():
        if any(map(eq, s, islice(s, 1, None))):
            return False  # consecutive ops of one coalesced group: add_rows merges them
    # interning in the order of first entries, as add_rows does row by row: kinds are in that order
    sig_index: dict[Signature, int] = {}
    site_index: dict[Frame, int] = {}
    groups, signatures, call_sites = trace.groups, trace.signatures, trace.call_sites
    k_sig, k_site, k_flags = [0] * n_kinds, [-1] * n_kinds, [0] * n_kinds
    for n, (pg_name, pg_desc, pg_id, _p2p, parsed, sig, site, state, retired, *_rest) in enumerate(kinds):
        if bucket_of[n] < 0:
            continue
        if pg_name not in groups:
            groups[pg_name] = GroupTrace(pg_name, pg_desc, pg_id)
        if site is not None:
            k_site[n] = site_index.setdefault(site, len(site_index))
            if k_site[n] == len(call_sites):
                call_sites.append(site)
        k_sig[n] = _intern(sig, sig_index, signatures)
        k_flags[n] = outcome_flags(state, retired, parsed[0], events)
    # every entry's flags and duration (µs, -1 for none) at once, then each group's by index
    entry_flags = array("B", [f | STARTED if t else f for f, t in zip(map(k_flags.__getitem__, which), started)])
    timed = not all(map(ne, durations, durations))  # any duration known (NaN, an unknown one, is d != d)
    entry_us = array("q", [-1 if d != d else int(d * 1000) for d in durations]) if timed else None
    for pg_name, idx in coll.items():
        g = groups[pg_name]
        ks = list(map(which.__getitem__, idx))
        g.seq = coll_seqs[pg_name]
        g.sig = array("i", map(k_sig.__getitem__, ks))
        g.flags = array("B", map(entry_flags.__getitem__, idx))
        g.created_ns = array("q", map(created.__getitem__, idx))
        g.duration_us = array("q", [-1]) * len(idx) if entry_us is None else array("q", map(entry_us.__getitem__, idx))
        g.site = array("i", map(k_site.__getitem__, ks))
    for pg_name, idx in p2p.items():
        ks = list(map(which.__getitem__, idx))
        names = [kinds[k][4] for k in ks]
        flags = list(map(p2p_flags, map(entry_flags.__getitem__, idx)))
        groups[pg_name].p2p = list(map(_new_tuple, repeat(P2POp), zip(
            map(p2p_seqs.__getitem__, idx), map(itemgetter(1), names), map(itemgetter(2), names),
            map(itemgetter(3), names), map(k_sig.__getitem__, ks), flags, map(created.__getitem__, idx),
            map(k_site.__getitem__, ks))))
    for g in groups.values():
        finish_group(g)
    return True


# Ops of one coalesced group (entries sharing a collective_seq_id) whose signatures are compared;
# more are merged into its state only. A real group has a few dozen; thousands would make building
# the signature quadratic (a hostile dump with 12,000 unfinished entries of one seq).
MAX_COALESCED_OPS = 256
# and the shapes they hold in all: an op can list thousands (an all_gather's outputs, one per rank), and a
# hostile dump 65,536 in each of 256 entries of one seq: 179 CPU-s of merging for one trace before this
MAX_COALESCED_SHAPES = 1 << 16


def _shapes(sig: Signature) -> int:
    return sum(len(o.input_sizes) + len(o.output_sizes) for o in sig)


def recent_p2p(ops: list[P2POp], keep: int = 8) -> list[P2POp]:
    """Pending p2p ops plus the last few per peer pair: enough to judge the frontier, small to ship.
    (model/_rows.c does the same loop where it is built: a followed trace asks it of every group whose
    p2p ops moved, every pass.)"""
    if _rows is not None:
        out = _rows.recent_p2p(ops, keep, FINISHED)
        if out is not NotImplemented:
            return out
    seen: dict[tuple, int] = {}
    out = []
    for op in reversed(ops):
        key = (op.op, op.src, op.dst)
        n = seen.get(key, 0)
        if n < keep or not op.flags & FINISHED:
            out.append(op)
        seen[key] = n + 1
    out.reverse()
    return out


def _intern(sig: Signature, index: dict[Signature, int], table: list[Signature]) -> int:
    i = index.get(sig)
    if i is None:
        i = index[sig] = len(table)
        table.append(sig)
    return i


def _merge_flags(a: int, b: int) -> int:
    done = (a & b) & (FINISHED | COMPLETED)  # a group is finished when all its ops are
    return done | ((a | b) & (RETIRED | STARTED | TIMED_OUT | ISSUED))


def _sort_group(g: GroupTrace) -> None:
    """Entries out of seq order (a wrapped or reset recorder): sort, keeping the newest of duplicates."""
    rows = {}
    for i, s in enumerate(g.seq):
        rows[s] = (g.sig[i], g.flags[i], g.created_ns[i], g.duration_us[i], g.site[i])
    order = sorted(rows)
    g.seq = array("q", order)
    g.sig = array("i", (rows[s][0] for s in order))
    g.flags = array("B", (rows[s][1] for s in order))
    g.created_ns = array("q", (rows[s][2] for s in order))
    g.duration_us = array("q", (rows[s][3] for s in order))
    g.site = array("i", (rows[s][4] for s in order))
