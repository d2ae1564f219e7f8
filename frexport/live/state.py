"""The sidecar's live state: every rank's latest snapshot and what changed between snapshots.

The sidecar loop calls `ingest` with each new snapshot. The state de-duplicates entries
across polls (ring buffers overlap from one poll to the next), counts entries
that wrapped away unseen, starts a new epoch when a rank restarts (its record
ids begin again), and emits one `EntryEvent` per entry when it is first seen
finished, the basis of exactly-once counters and spans. Exporters read it at
scrape time (`view`) or get the events of each pass; nothing flows back. The
diagnosis is not kept here: the live analysis holds its own latest result.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain, compress, repeat
from operator import attrgetter, sub, truediv
from typing import NamedTuple

from frexport.model.dump import Entry, ProcessGroupStatus, RankDump
from frexport.model.entry_runs import any_set, distinct, fields_at, runs
from frexport.model.outcome import Outcome, event_backends, outcome_of
from frexport.model.record_index import NO_RECORDS, RecordIndex

# Prometheus buckets for collective durations, 100 us to 30 min.
DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)


class EntryEvent(NamedTuple):
    """(A named tuple, not a frozen dataclass: one is made per entry, and a tuple is made 4x faster.)"""

    rank: int
    epoch: int
    entry: Entry
    outcome: Outcome  # how it ended, by the one rule of model/outcome.py
    observed_ns: int  # when the sidecar first saw it finished: the end time gloo cannot tell
    world_size: int | None = None  # as the rank's snapshot says, when it does


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: list[float]) -> None:
        """Many at once, each in the first bucket whose bound is >= it (C-level passes: a busy rank's
        timed ops, nccl2's every op, come in runs of hundreds)."""
        ordered, counts, below = sorted(seconds), self.counts, 0
        for i, bound in enumerate(DURATION_BUCKETS):
            upto = bisect_right(ordered, bound, below)  # (durations are finite: fields.duration_ms)
            counts[i] += upto - below
            below = upto
        self.total = sum(seconds, self.total)  # (added in order, as one at a time)
        self.count += len(seconds)


@dataclass
class GroupProgress:
    pg_name: str
    pg_desc: str
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None
    last_progress_ns: int | None = None
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)  # op -> (count, oldest created_ns)
    timeout_ms: int | None = None
    seen_ns: int = 0  # last snapshot that still held an entry of the group
    status: ProcessGroupStatus | None = None  # PyTorch's pg_status row as last read (with entries or alone)
    # Whether that status numbers the group's collectives as its entries do: True while the two agreed
    # at every entries read so far, False for good once they did not (gloo also counts the p2p ops it
    # does not record). Only then are its numbers shown between entries reads (status first).
    status_counts: bool | None = None

    def current(self) -> tuple[int | None, int | None, int | None]:
        """(last enqueued, started, completed): the entries' numbers, or the status's where it is newer
        and numbers collectives as the entries do; fresh at every status read, not every entries read."""
        s = self.status if self.status_counts else None
        if s is None:
            return self.last_enqueued, self.last_started, self.last_completed
        return (_newer(self.last_enqueued, s.last_enqueued), _newer(self.last_started, s.last_started),
                _newer(self.last_completed, s.last_completed))

    def done_through(self) -> int | None:
        """The newest sequence number the status says finished, where its numbers are the entries'."""
        s = self.status if self.status_counts else None
        return _known(s.last_completed) if s is not None else None

    def idle(self) -> bool:
        """The status says nothing is pending (in its own units, whatever they count)."""
        s = self.status
        done, enq = (_known(s.last_completed), _known(s.last_enqueued)) if s is not None else (None, None)
        return done is not None and enq is not None and done >= enq


@dataclass
class RankState:
    rank: int
    source: str
    epoch: int = 0
    dump: RankDump | None = None
    first_seen_ns: int = 0
    last_seen_ns: int = 0
    max_record: int = -1
    pending: set[int] = field(default_factory=set)
    timed_out: set[int] = field(default_factory=set)  # settled, yet where the rank is stuck (Outcome.TIMED_OUT)
    by_record: RecordIndex = NO_RECORDS  # the entries of `dump`, by record id
    dropped: int = 0
    groups: dict[str, GroupProgress] = field(default_factory=dict)
    held_ns: int = 0  # when its counted pairs were last marked held by its snapshot (`_held`)


# the families whose label sets the state bounds, as `refused()` names them
COLLECTIVE_FAMILIES = ("frexport_collectives_total", "frexport_collective_duration_seconds")
GROUP_FAMILY = "frexport_pg_last_enqueued_collective"


class LiveState:
    """`max_label_sets` bounds the (pg_desc, op) pairs counted and the process groups kept per rank:
    label values come from the dumps, and a dump rewritten with fresh names must not grow the state
    (or the scrape) for good. Pairs and groups no snapshot holds expire with the ranks."""

    def __init__(self, max_ranks: int = 4096, max_label_sets: int = 256, count: bool = True,
                 events: bool = True) -> None:
        self._lock = threading.Lock()
        # False: `ingest` makes no events (no sink takes them: spans are off, the default). One tuple per
        # finished entry was a fifth of a busy rank's ingest, made to be dropped.
        self.events = events
        # False: keep each rank's latest snapshot only, no events, counts or group progress. The job-level
        # view: its ranks' series come from their own pods' sidecars (exporting them twice would double
        # the job-wide rules' input), and that bookkeeping was a third of its pass at 4096 ranks.
        self.count = count
        self.max_ranks = max_ranks
        self.max_label_sets = max_label_sets
        self.ranks: dict[int, RankState] = {}
        self.collectives: Counter[tuple[str, str, str]] = Counter()  # (pg_desc, op, outcome)
        self.durations: dict[tuple[str, str], Histogram] = {}  # (pg_desc, op)
        self.pair_seen_ns: dict[tuple[str, str], int] = {}  # (pg_desc, op) counted -> last held by a snapshot
        self._refused: Counter[str] = Counter()  # by family: finished entries / groups not kept (state full)
        self.timeout_dumps: Counter[int] = Counter()
        # The same entries re-stamped mark their pairs held at most this often: a tenth of the expiry
        # `expire` was last asked for (a pair's mark then lags by no more than that), 0 before it was
        self._held_every_ns = 0

    # --- writer: the sidecar loop ------------------------------------------------------------

    def ingest(self, dump: RankDump, source: str, now_ns: int,
               groups: Mapping[str, ProcessGroupStatus] | None = None) -> list[EntryEvent]:
        """Take a rank's new snapshot; returns the events of entries first seen finished (none when
        the snapshot is older than what we have, the state is full of other ranks, or `events` is off;
        the counts are the same either way). `groups`: the
        pg_status read with it, by group name (sources/base.py Snapshot.groups)."""
        rank = dump.rank
        if rank is None:
            raise ValueError("a snapshot needs a rank")
        with self._lock:
            rs = self.ranks.get(rank)
            if rs is None:
                if len(self.ranks) >= self.max_ranks:
                    return []
                rs = self.ranks[rank] = RankState(rank, source, first_seen_ns=now_ns)
            elif rs.dump is not None and dump.dumped_at_ns and rs.dump.dumped_at_ns \
                    and dump.dumped_at_ns < rs.dump.dumped_at_ns:
                return []
            if not self.count:
                rs.dump, rs.source, rs.last_seen_ns = dump, source, now_ns
                return []
            if rs.dump is not None and dump.entries is rs.dump.entries:
                # the same entries seen again (re-stamped by a status read, sources/entry_schedule.py):
                # nothing new to count; what they hold is still held
                for g in rs.groups.values():
                    if g.seen_ns == rs.last_seen_ns:
                        g.seen_ns = now_ns
                rs.dump, rs.source, rs.last_seen_ns = dump, source, now_ns
                if now_ns - rs.held_ns >= self._held_every_ns:
                    # (a pass over a buffer that sat cold in memory since the last read: ~0.2 ms a rank
                    # a second when done at every status read, for a refresh the expiry needs rarely)
                    self._held(distinct(dump.entries, _PAIR), now_ns)
                    rs.held_ns = now_ns
                self._status(rs, groups, now_ns, with_entries=True)
                self._recount_pending(rs)
                return []
            index = RecordIndex(dump.entries)
            if rs.dump is not None and self._restarted(rs, dump, index):
                rs.epoch += 1
                rs.max_record, rs.pending, rs.timed_out, rs.groups = -1, set(), set(), {}
            events, changed, outcomes, kinds = self._advance(rs, dump, now_ns, index)
            rs.dump, rs.source, rs.last_seen_ns, rs.by_record = dump, source, now_ns, index
            self._progress(rs, changed, outcomes, kinds, now_ns)
            held = distinct(dump.entries, _HELD)  # (one pass over the whole buffer for both)
            self._held({pair[:2] for pair in held}, now_ns)
            rs.held_ns = now_ns
            for name in {h[2] for h in held}:
                if name in rs.groups:
                    rs.groups[name].seen_ns = now_ns
            self._status(rs, groups, now_ns, with_entries=True)
            self._recount_pending(rs)
        return events

    def observe_status(self, rank: int, groups: Mapping[str, ProcessGroupStatus], now_ns: int) -> None:
        """A status read without entries (status first): the groups' numbers, progress and pending
        are as fresh as it; the entries, and so counts, spans and the analysis, wait for their read."""
        with self._lock:
            rs = self.ranks.get(rank)
            if rs is None or not self.count:
                return
            rs.last_seen_ns = now_ns
            self._status(rs, groups, now_ns, with_entries=False)
            self._recount_pending(rs)

    def count_timeout_dump(self, rank: int) -> None:
        with self._lock:
            self.timeout_dumps[rank] += 1

    def expire(self, now_ns: int, after_ns: int) -> list[int]:
        """Forget ranks not seen for `after_ns`, and process groups no snapshot has held for as long
        (destroyed, or wrapped out of every buffer): their series disappear instead of freezing."""
        with self._lock:
            self._held_every_ns = after_ns // 10
            gone = [r for r, rs in self.ranks.items() if now_ns - rs.last_seen_ns > after_ns]
            for r in gone:
                del self.ranks[r]
                self.timeout_dumps.pop(r, None)
            for rs in self.ranks.values():
                for name in [n for n, g in rs.groups.items() if g.seen_ns and now_ns - g.seen_ns > after_ns]:
                    del rs.groups[name]
            # counts whose labels no snapshot holds any more: a rewrite with fresh op names must not
            # leave its series behind for good (a counter that comes back starts again, as after a restart)
            for pair in [p for p, seen in self.pair_seen_ns.items() if now_ns - seen > after_ns]:
                del self.pair_seen_ns[pair]
                self.durations.pop(pair, None)
                for outcome in [k for k in self.collectives if k[:2] == pair]:
                    del self.collectives[outcome]
            return gone

    def forget(self, ranks: list[int]) -> None:
        """Drop ranks their source no longer has (a peer stopped sending them): memory stays bounded by
        what the sources hold, not by every rank id ever sent."""
        with self._lock:
            for r in ranks:
                self.ranks.pop(r, None)
                self.timeout_dumps.pop(r, None)

    def refused(self) -> dict[str, int]:
        """By family: what the state did not keep because it held `max_label_sets` already."""
        with self._lock:
            return dict(self._refused)

    # --- readers ----------------------------------------------------------------------------

    def latest_dumps(self) -> dict[int, RankDump]:
        with self._lock:
            return {r: rs.dump for r, rs in self.ranks.items() if rs.dump is not None}

    def latest_epochs(self) -> dict[int, tuple[int, RankDump]]:
        """Each rank's epoch and latest snapshot (the peers endpoint: a cursor is only good within an epoch)."""
        with self._lock:
            return {r: (rs.epoch, rs.dump) for r, rs in self.ranks.items() if rs.dump is not None}

    def view(self) -> "StateView":
        """A consistent copy for one scrape: collectors never hold the lock while formatting."""
        with self._lock:
            return StateView(
                ranks={r: _copy_rank(rs) for r, rs in self.ranks.items()},
                collectives=dict(self.collectives),
                durations={k: Histogram(list(h.counts), h.total, h.count) for k, h in self.durations.items()},
                timeout_dumps=dict(self.timeout_dumps),
            )

    # --- internals --------------------------------------------------------------------------

    @staticmethod
    def _restarted(rs: RankState, dump: RankDump, index: RecordIndex) -> bool:
        """Record ids only grow within one process; going back, or a known id with another
        creation time, means the rank restarted (or the recorder was reset). `index`: the dump's."""
        if not dump.entries or rs.max_record < 0:
            return False
        if index.newest() < rs.max_record:
            return True
        for e in dump.entries[:1] + dump.entries[-1:]:
            old = rs.by_record.get(e.record_id)
            if old is not None and old.time_created_ns != e.time_created_ns:
                return True
        return False

    def _advance(self, rs: RankState, dump: RankDump, now_ns: int, index: RecordIndex
                 ) -> tuple[list[EntryEvent], Sequence[Entry], list[Outcome], list[tuple[tuple, int, Outcome]]]:
        """Events for entries first seen finished; also every entry that is new or changed, its outcome,
        and their runs of one kind (the `_KIND` fields, how many, their outcome). Run by run rather than
        entry by entry (a busy rank brings hundreds a second, nearly all in long runs of one op): an
        outcome depends only on the entry's state, retired and backend (outcome_of), so it is worked out
        once per such triple; the counts are added once per run."""
        if dump.entries and rs.max_record >= 0:
            oldest = dump.entries[0].record_id
            if oldest > rs.max_record + 1:  # created and wrapped away between two snapshots
                rs.dropped += oldest - rs.max_record - 1
        changed = _unseen(index, rs.max_record, rs.pending)
        if not changed:
            return [], changed, [], []
        recorders = event_backends(dump.entries)
        by_key: dict[tuple, Outcome] = {}  # (state, retired, backend) -> outcome
        kinds: list[tuple[tuple, int, Outcome]] = []
        at = 0
        for key, n in runs(changed, _KIND):
            outcome = by_key.get(key[2:5])
            if outcome is None:
                outcome = by_key[key[2:5]] = outcome_of(changed[at], recorders)
            kinds.append((key, n, outcome))
            at += n
        outcomes = list(chain.from_iterable(repeat(o, n) for _key, n, o in kinds))
        rs.max_record = max(rs.max_record, index.newest())  # (the newest entry is among the changed ones)
        if PENDING in by_key.values():  # (a rank read while an op is in flight)
            settled: list[Entry] = []
            done_outcomes: list[Outcome] = []
            at, was_pending = 0, bool(rs.pending)
            for _key, n, o in kinds:
                run, at = changed[at:at + n], at + n
                if o is PENDING:
                    rs.pending.update(map(_record_id, run))
                    continue
                if was_pending:  # (a record id is changed once: those pending since this snapshot are others)
                    rs.pending.difference_update(map(_record_id, run))
                settled.extend(run)
                done_outcomes.extend(repeat(o, n))
            done: Sequence[Entry] = settled
        else:
            if rs.pending:
                rs.pending.difference_update(map(_record_id, changed))
            done, done_outcomes = changed, outcomes
        if Outcome.TIMED_OUT in by_key.values():
            rs.timed_out.update(e.record_id for e, o in zip(changed, outcomes) if o is Outcome.TIMED_OUT)
        self._count([(key[:2], o, n) for key, n, o in kinds if o is not PENDING], done, done_outcomes, now_ns)
        events = list(map(_event, zip(repeat(rs.rank), repeat(rs.epoch), done, done_outcomes, repeat(now_ns),
                                      repeat(dump.world_size)))) if self.events else []
        return events, changed, outcomes, kinds

    def _count(self, counted: list[tuple[tuple[str, str], Outcome, int]], done: Sequence[Entry],
               outcomes: list[Outcome], now_ns: int) -> None:
        """Count the entries seen settled by (pg_desc, op, outcome), from their runs ((pg_desc, op), outcome,
        how many), and time those proven over (`done`, each with its outcome)."""
        kept = {pair: self._admit(pair, now_ns) for pair, _o, _n in counted}  # in first-seen order
        collectives = self.collectives
        for pair, outcome, n in counted:
            if kept[pair]:
                collectives[pair + (outcome,)] += n
            else:
                for family in COLLECTIVE_FAMILIES:
                    self._refused[family] += n
        if any_set(done, _TIMING):  # (none timed, as a busy gloo rank's: one C pass says so)
            at = 0  # `done` is the settled runs of `counted`, in order
            for pair, outcome, n in counted:
                run, at = done[at:at + n], at + n
                if (outcome is COMPLETED or outcome is RETIRED) and kept[pair]:  # outcome.done
                    self._observe(pair, run)

    def _admit(self, pair: tuple[str, str], now_ns: int) -> bool:
        """Whether a (pg_desc, op) pair is counted: the state holds at most `max_label_sets`."""
        if pair not in self.pair_seen_ns and len(self.pair_seen_ns) >= self.max_label_sets:
            return False
        self.pair_seen_ns[pair] = now_ns
        return True

    def _observe(self, pair: tuple[str, str], run: Sequence[Entry]) -> None:
        """The durations of a run of one pair's entries proven over."""
        # duration_s's rule, without a call per entry where the run is timed one way
        millis = list(map(_duration_ms, run))
        if None not in millis:  # every op timed by its recorder (nccl2's hook, NCCL with timing)
            seconds = list(map(truediv, millis, repeat(1000.0)))
        elif millis.count(None) == len(millis) and (elapsed_ns := _discovered_ns(run)) is not None:
            seconds = list(map(truediv, elapsed_ns, repeat(1e9)))
        else:
            seconds = [s for s in map(duration_s, run) if s is not None]
        if seconds:
            h = self.durations.get(pair)
            if h is None:
                h = self.durations[pair] = Histogram()
            h.observe(seconds)

    def _held(self, pairs: Iterable[tuple], now_ns: int) -> None:
        """The counted pairs a snapshot still holds stay: they expire only once none does."""
        seen = self.pair_seen_ns
        if not seen:
            return
        for pair in pairs:
            if pair in seen:
                seen[pair] = now_ns

    def _progress(self, rs: RankState, changed: Sequence[Entry], outcomes: list[Outcome],
                  kinds: list[tuple[tuple, int, Outcome]], now_ns: int) -> None:
        """Update each group's progress from the entries that are new or changed since the last
        snapshot (values only grow within an epoch; `outcomes`: theirs, `kinds`: their runs): only an
        entry that proves its op over moves `last_completed`. Pending is recounted by the caller, once
        the status read with them is in too."""
        if not rs.groups:
            self._first_progress(rs, changed, outcomes)
        else:
            self._progress_by_run(rs, changed, kinds, now_ns)

    def _progress_by_run(self, rs: RankState, changed: Sequence[Entry], kinds: list[tuple[tuple, int, Outcome]],
                         now_ns: int) -> None:
        """Each run of one kind at once: its numbers only grow, so a run moves a group to its greatest
        seq; the group's timeout is its last entry's. A group whose ops completed progressed now."""
        groups = rs.groups
        at = 0
        for (desc, _op, state, _retired, _backend, name, is_p2p, timeout), n, outcome in kinds:
            run, at = changed[at:at + n], at + n
            if is_p2p:
                continue
            g = groups.get(name)
            if g is None:
                if len(groups) >= self.max_label_sets:
                    self._refused[GROUP_FAMILY] += n
                    continue
                g = groups[name] = GroupProgress(name, desc)
            seqs = list(map(_seq, run))
            top = max(seqs)
            g.timeout_ms = timeout
            if g.last_enqueued is None or top > g.last_enqueued:
                g.last_enqueued = top
            started = top if state != "scheduled" else max(compress(seqs, map(_time_started, run)), default=None)
            if started is not None and (g.last_started is None or started > g.last_started):
                g.last_started = started
            if (outcome is COMPLETED or outcome is RETIRED) and (g.last_completed is None or top > g.last_completed):
                g.last_completed = top
                g.last_progress_ns = now_ns

    def _first_progress(self, rs: RankState, changed: Sequence[Entry], outcomes: list[Outcome]) -> None:
        """A rank's first snapshot (of an epoch), entry by entry: its groups progressed when their ops
        that completed were enqueued, as well as the dump tells."""
        groups = rs.groups
        g: GroupProgress | None = None
        for e, outcome in zip(changed, outcomes):
            if e.is_p2p:
                continue
            if g is None or g.pg_name != e.pg_name:  # (a run of one group's entries: looked up once)
                g = groups.get(e.pg_name)
                if g is None:
                    if len(groups) >= self.max_label_sets:
                        self._refused[GROUP_FAMILY] += 1
                        continue
                    g = groups[e.pg_name] = GroupProgress(e.pg_name, e.pg_desc)
            seq = e.collective_seq_id
            g.timeout_ms = e.timeout_ms
            if g.last_enqueued is None or seq > g.last_enqueued:
                g.last_enqueued = seq
            if (e.state != "scheduled" or e.time_started_ns) and (g.last_started is None or seq > g.last_started):
                g.last_started = seq
            if (outcome is COMPLETED or outcome is RETIRED) and (g.last_completed is None or seq > g.last_completed):
                g.last_completed = seq
                g.last_progress_ns = max(g.last_progress_ns or 0, e.time_created_ns) or None

    def _status(self, rs: RankState, groups: Mapping[str, ProcessGroupStatus] | None, now_ns: int,
                with_entries: bool) -> None:
        """Take in the groups' pg_status; `with_entries`: read with the entries (the same dump or the
        same moment), so it can be checked against them."""
        if not groups:
            return
        for name, row in groups.items():
            g = rs.groups.get(name)
            if g is None:
                continue
            if with_entries and g.status_counts is not False:
                g.status_counts = g.last_enqueued is not None and _known(row.last_enqueued) == g.last_enqueued
            before, g.status = g.status, row
            done, was = _known(row.last_completed), _known(before.last_completed) if before is not None else None
            if before is not None and done is not None and (was is None or done > was):
                g.last_progress_ns = now_ns

    @staticmethod
    def _recount_pending(rs: RankState) -> None:
        """Each group's pending ops, by op: the entries not seen settled and those that timed out (the
        ranks are stuck there), less those the status read since says finished. An op known only to be
        issued is not counted: nothing says it is still pending."""
        for group in rs.groups.values():
            group.pending = {}
        if rs.timed_out:
            rs.timed_out = {rid for rid in rs.timed_out if rs.by_record.get(rid) is not None}
        for rid in rs.pending | rs.timed_out:
            e = rs.by_record.get(rid)
            if e is None or e.is_p2p:
                continue
            g = rs.groups.get(e.pg_name)
            if g is None or g.idle():
                continue
            done = g.done_through()
            if done is not None and e.collective_seq_id <= done:
                continue
            count, oldest = g.pending.get(e.op, (0, e.time_created_ns))
            g.pending[e.op] = (count + 1, min(oldest, e.time_created_ns))


def _unseen(index: RecordIndex, max_record: int, pending: set[int]) -> Sequence[Entry]:
    """The entries `_advance` must look at, each record once, in order: those past `max_record` and
    the pending ones. A dump's entries are in record order (ids only grow): the older ones are skipped
    by bisection instead of one by one. Where they are not in order (a corrupt dump), a record listed
    twice is looked at once, as its last listing says."""
    entries, rids = index.entries, index.ids
    if index.by_id is not None:  # out of order
        return [e for r, e in index.by_id.items() if r > max_record or r in pending]
    cut = bisect_right(rids, max_record)
    if not pending:
        return entries[cut:]
    older = sorted(i for p in pending if (i := bisect_left(rids, p)) < cut and rids[i] == p)
    return [entries[i] for i in older] + list(entries[cut:])


PENDING, COMPLETED, RETIRED = Outcome.PENDING, Outcome.COMPLETED, Outcome.RETIRED

# C-level field access: ingest runs on every rank's every snapshot (4096 x 256 entries in a job's view)
_record_id = attrgetter("record_id")
_pair = attrgetter("pg_desc", "op")
# an entry's kind for the ingest: its labels, what its outcome depends on, its group (`runs` of them)
_KIND = fields_at("pg_desc", "op", "state", "retired", "backend", "pg_name", "is_p2p", "timeout_ms")
# the pairs a snapshot holds (their counts stay), and with them its groups (seen now)
_PAIR, _HELD = fields_at("pg_desc", "op"), fields_at("pg_desc", "op", "pg_name")
_duration_ms, _time_started = attrgetter("duration_ms"), attrgetter("time_started_ns")
_TIMING = fields_at("duration_ms", "time_started_ns")  # what durations are read from (Entry.duration_s)
_time_completed = attrgetter("time_completed_ns")
_seq = attrgetter("collective_seq_id")
_event = partial(tuple.__new__, EntryEvent)  # (an EntryEvent from one tuple of its fields, in C)


def _known(seq: int | None) -> int | None:
    """A pg_status number, None where PyTorch says none (-1: gloo never records a start)."""
    return seq if seq is not None and seq >= 0 else None


def _newer(a: int | None, b: int | None) -> int | None:
    b = _known(b)
    return b if a is None or (b is not None and b > a) else a


def duration_s(e: Entry) -> float | None:
    """How long an op took by its recorder: duration_ms, else discovered start to completion (asked only
    of an op proven over: Outcome.done)."""
    if e.duration_ms is not None:
        return e.duration_ms / 1000.0
    if e.time_started_ns and e.time_completed_ns and e.time_completed_ns >= e.time_started_ns:
        return (e.time_completed_ns - e.time_started_ns) / 1e9
    return None


def _discovered_ns(run: Sequence[Entry]) -> list[int] | None:
    """Each entry's discovered start to completion (NCCL without timing), where every one has both in
    order, else None."""
    starts, ends = list(map(_time_started, run)), list(map(_time_completed, run))
    if not (all(starts) and all(ends)):
        return None
    elapsed = list(map(sub, ends, starts))
    return elapsed if min(elapsed) >= 0 else None


def _copy_rank(rs: RankState) -> RankState:
    groups = {name: replace(g, pending=dict(g.pending)) for name, g in rs.groups.items()}
    return RankState(rs.rank, rs.source, rs.epoch, rs.dump, rs.first_seen_ns, rs.last_seen_ns, rs.max_record,
                     set(), set(), NO_RECORDS, rs.dropped, groups)


@dataclass
class StateView:
    ranks: dict[int, RankState]
    collectives: dict[tuple[str, str, str], int]
    durations: dict[tuple[str, str], Histogram]
    timeout_dumps: dict[int, int]
