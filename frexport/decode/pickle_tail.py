"""The live sidecar's new tail from the agent's pickle answer (`frexport_fr_live?...&format=pickle`).

The agent cuts the entries before the sidecar's cursor out of PyTorch's pickle dump without loading it
(agent/live.py `_cut`): what arrives is the dump's head, its oldest entry, the few older entries that
first write a string the rest refers to, and every entry from the cursor on. The compiled scanner reads
that in C into kinds and columns (scanned.columns: about 1 µs an entry and no object per entry, where
msgspec's typed decode of the JSON answer took ~10 µs), and this module hands normalize the entries
from the cursor on as those columns (`ScannedEntries`): normalize runs the field rules once per kind
and thread, and C makes each entry from its kind's template and its own numbers (scanned.entries), or
where it reuses older entries reads them by kind (normalize.KindedEntries), as json_decode.parse_tail
gives the JSON answer. Either way the same Entry objects (tests/unit/decode/test_pickle_tail.py, and
tests/e2e/test_live_handler_pickles.py on real dumps of every torch build installed).

It answers None wherever it cannot tell safely, and the caller reads the whole buffer: no scanner
(it never unpickles in-process: see sandbox.py), a pickle outside the common shape or with stack
frames, record ids other than a right cut leaves (a cut that landed wrong, a buffer being rewritten).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable
from math import isnan
from operator import itemgetter

from frexport.decode import scanned
from frexport.decode.json_decode import TOP_KEYS, FirstSeen, Tail
from frexport.decode.normalize import ColumnEntries, KindedEntries
from frexport.model.dump import Entry
from frexport.model.entry_runs import ascends

# the scanner's numbers per entry (scanned.N_INTS): where each of KindedEntries.NUMBERS sits
_SEQ, _P2P, _CREATED, _STARTED, _COMPLETED, _RECORD, _OP_ID, _THREAD = range(scanned.N_INTS)
_ZERO_IS_NONE = {0: None}  # the scanner's 0 for a time not yet discovered (None in the pickle)


def parse_pickle_tail(body: bytes, since: int) -> Tail | None:
    """The entries from the one with record id `since` on, by kind, and the rest of the document, from
    the agent's cut pickle (or a whole one); None where that cannot be told safely (see the module)."""
    cols = scanned.columns(body)
    if cols is None:
        return None
    top, kinds, which, nums, durations, stacks, _frames, threads = cols
    if stacks:
        return None  # stack frames: not what the live answer holds (the plain path reads them)
    k = scanned.N_INTS
    rids = nums[_RECORD::k]
    at = _cursor_at(rids, since)
    if at is None:
        return None
    meta = {key: top[key] for key in TOP_KEYS if key in top}
    return Tail(meta, rids[0], ScannedEntries(kinds, threads, which, nums, durations, at, len(rids)),
                nums[at * k + _CREATED])


class ScannedEntries(ColumnEntries):
    """The scanner's columns of entries [start, stop): each entry built in C from its kind's template
    (`build`: scanned.entries), or given by kind (`kinded`) where normalize reuses older ones."""

    def __init__(self, kinds: list, threads: list, which: array, nums: array, durations: array, start: int,
                 stop: int) -> None:
        self.kinds, self.threads, self.which, self.nums, self.durations = kinds, threads, which, nums, durations
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, cut: slice) -> ScannedEntries:
        kept = range(self.start, self.stop)[cut]
        if kept.step != 1:
            raise ValueError("entries are cut into one run")
        return ScannedEntries(self.kinds, self.threads, self.which, self.nums, self.durations, kept.start,
                              max(kept.start, kept.stop))

    def build(self, template: Callable[[dict], Entry | None]) -> tuple[list[Entry], int]:
        def template_of(kind: int, thread: int) -> Entry | None:
            e = template(_first(self.kinds[kind], self.threads[thread]))
            # the entry's pg_id is the kind's as written, where the rules would give -1 for a bad one
            return None if e is None else e._replace(pg_id=self.kinds[kind][2])

        return scanned.entries(template_of, self.which, self.nums, self.durations, self.start, self.stop, _SLOTS)

    def kinded(self) -> KindedEntries:
        at, stop, k, nums = self.start, self.stop, scanned.N_INTS, self.nums
        which = self.which[at:stop]
        live_kind = FirstSeen()  # the scanner's kind and the entry's thread: what a JSON entry's kind holds
        kind_of = list(map(live_kind.__getitem__, zip(which, nums[at * k + _THREAD:stop * k:k])))
        firsts = [_first(self.kinds[kind], self.threads[thread]) for kind, thread in live_kind]
        pg_ids = list(map(itemgetter(2), self.kinds))
        duration = self.durations[at:stop]
        durs = [None] * len(which) if all(map(isnan, duration)) else [None if d != d else d for d in duration]
        started, completed = nums[at * k + _STARTED:stop * k:k], nums[at * k + _COMPLETED:stop * k:k]
        numbers = list(zip(nums[at * k + _RECORD:stop * k:k], map(pg_ids.__getitem__, which),
                           nums[at * k + _SEQ:stop * k:k], nums[at * k + _P2P:stop * k:k],
                           nums[at * k + _OP_ID:stop * k:k], nums[at * k + _CREATED:stop * k:k],
                           map(_ZERO_IS_NONE.get, started, started), map(_ZERO_IS_NONE.get, completed, completed),
                           durs))
        return KindedEntries(firsts, kind_of, numbers)


# where scanned.entries writes an entry's own numbers: record_id, collective_seq_id, p2p_seq_id, op_id,
# time_created_ns, time_started_ns, time_completed_ns, duration_ms (the Entry's fields, by position)
_SLOTS = tuple(map(Entry._fields.index, ("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
                                         "time_started_ns", "time_completed_ns", "duration_ms")))


def _cursor_at(rids: array, since: int) -> int | None:
    """Where the entry `since` is, if the record ids are what a right cut leaves: ascending, and
    consecutive from `since` on (the agent keeps every entry from its cursor on, and some before)."""
    if not rids or not ascends(rids):
        return None
    at = bisect_left(rids, since)
    if at == len(rids) or rids[at] != since or rids[-1] - since != len(rids) - 1 - at:
        return None
    return at


def _first(kind: tuple, thread: tuple) -> dict:
    """A kind as the plain entry normalize's field rules read (its numbers are each entry's own)."""
    pg_name, pg_desc, pg_id, is_p2p, pname, state, retired, in_s, out_s, in_d, out_d, _stack, timeout = kind
    return {"record_id": 0, "pg_id": pg_id, "process_group": (pg_name, pg_desc), "collective_seq_id": 0,
            "p2p_seq_id": 0, "op_id": 0, "profiling_name": pname, "time_created_ns": 0, "state": state,
            "is_p2p": is_p2p, "input_sizes": in_s, "output_sizes": out_s, "input_dtypes": in_d,
            "output_dtypes": out_d, "retired": retired, "timeout_ms": timeout, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "thread_id": thread[0], "thread_name": thread[1]}
