"""Reads a peer sidecar's /api/v1/ranks body (columns in model/peer_rows.py) into entries.

The body comes over the network from another pod, possibly a hostile one: its size is capped by the
client, at most `max_ranks` ranks of it are read, and every row goes through the same field rules and
bounds as a dump's entry (decode/fields.py): a value out of range is absent (a timeout_ms of -10**400,
a member rank 1000000000, a world size of 10**12), a row without the columns' shapes is dropped and
counted, a rank without its required keys is dropped and counted. Only a body that is not the format
at all is an error of that peer (DecodeError); never one row or rank for every rank.

A 16384-rank job sends ~330,000 rows a pass (5 million in a first pass), so a body is first decoded
with the columns' types (`_typed_body`): msgspec checks every row's types and 64-bit bounds in C,
and Python only applies the rules no type says (a discovery time of 0 is unknown, a duration's bounds)
and interns. Anything the types refuse (a wrong type, a value out of range, NaN, rows too long or
short) sends the whole body the general way, row by row, which drops or blanks exactly what breaks
the rules: the typed way only ever accepts less, and gives the same ranks where it accepts
(tests/unit/decode/test_peer_rows_typed.py). Sizes and dtypes are interned (`intern`, kept by the
caller across bodies): equal shapes are one object, which is also what lets the trace builder key
signatures by identity.

A rank's rows may come as kinds (`rows=kinds`, model/peer_rows.NUMBER_COLUMNS): the general way reads each
as the whole row it stands for (`_kind_rows`), the typed way makes each kind's entry once and writes each
row's numbers into it (`_typed_kind_rows`), by the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Annotated, Any

import msgspec

from frexport.decode.errors import DecodeError
from frexport.decode.fields import (
    INT64_MAX,
    INT64_MIN,
    MAX_DTYPES,
    MAX_DURATION_MS,
    MAX_NAME,
    MAX_SIZE_ELEMENTS,
    discovered_ns,
    duration_ms,
    opt_int,
)
from frexport.decode.json_decode import loads, typed_decodable
from frexport.model.dump import Entry, ProcessGroupConfig, ProcessGroupStatus
from frexport.model.peer_rows import COLUMNS, FORMAT, KIND_AT, KIND_COLUMNS, NUMBER_AT, NUMBER_COLUMNS
from frexport.model.untrack import untrack_plain, untracked_rows, untracked_rows_of_kinds
from frexport.model.world import MAX_WORLD, is_rank, is_world_size

_N = len(COLUMNS)
_NUMBERS = len(NUMBER_COLUMNS)
_INT = {i for i, c in enumerate(COLUMNS) if c in ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id",
                                                   "time_created_ns")}
_STR = {i for i, c in enumerate(COLUMNS) if c in ("pg_name", "pg_desc", "profiling_name", "backend", "op", "state")}
_OPT_INT = [COLUMNS.index(c) for c in ("op_id", "p2p_src", "p2p_dst", "timeout_ms")]
_DISCOVERED = [COLUMNS.index(c) for c in ("time_started_ns", "time_completed_ns")]
_DURATION, _IS_P2P, _RETIRED = COLUMNS.index("duration_ms"), COLUMNS.index("is_p2p"), COLUMNS.index("retired")
_THREAD = [COLUMNS.index(c) for c in ("thread_id", "thread_name")]
_LO, _HI = INT64_MIN, INT64_MAX
_SIZES = [COLUMNS.index("input_sizes"), COLUMNS.index("output_sizes")]
_DTYPES = [COLUMNS.index("input_dtypes"), COLUMNS.index("output_dtypes")]
_INTS, _STRS = itemgetter(*sorted(_INT)), itemgetter(*sorted(_STR))
_INT_TYPES, _STR_TYPES = (int,) * len(_INT), (str,) * len(_STR)
_NO_FRAMES = ((), None)  # frames, call_site: the live window carries no stacks
_new_tuple = tuple.__new__
MAX_GROUPS = 100_000  # as normalize reads a dump's pg_config
MAX_INTERNED = 65536  # distinct shapes kept by `intern`: a peer sending endless new shapes must not grow it


@dataclass(frozen=True)
class PeerRank:
    rank: int
    epoch: int
    dumped_at_ns: int | None
    world_size: int | None
    first: int | None  # oldest record of the peer's window: older ones are out of it
    full: bool  # the whole window (no cursor, or a new epoch)
    version: str | None
    comm_lib_version: str | None
    pg_config: tuple[ProcessGroupConfig, ...] | None  # only with a whole rank
    pg_status: tuple[ProcessGroupStatus, ...]
    handlers: frozenset[str]
    entries: tuple[Entry, ...]
    rows_dropped: int = 0  # rows that broke the field rules (counted, logged by the source)
    # per group of pg_config, its members as checked runs where the peer sent them so (that group's
    # ranks are then None: the source expands each distinct list once, sources/peers.py)
    pg_runs: tuple[Runs | None, ...] | None = None
    # the entries as the peer sent them in kinds (model/peer_rows.NUMBER_COLUMNS): (the entries, their
    # templates, each one's kind, their number columns), what the decoders hand the view
    kinds: Kinds | None = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple:
        # the decoders hand ranks to the view pickled: the entries as their kinds and numbers where the peer
        # sent them so (a busy rank's 20 new rows: 4 templates and 8 columns), else as columns, each a list
        # the pickler writes in one pass (an Entry pickles through its class's Python __new__, field by field:
        # of a 16384-rank view's first pass, ~9 CPU s in the decoders and ~8 in the view)
        fields = [getattr(self, f) for f in _PEER_RANK_FIELDS]
        kinds, fields[_KINDS_AT] = self.kinds, None
        fields[_ENTRIES_AT] = kinds[1:] if kinds is not None and kinds[0] is self.entries else list(zip(*self.entries))
        return _peer_rank, (fields,)


Kinds = tuple[tuple[Entry, ...], tuple[tuple, ...], tuple[int, ...], list[tuple]]


def _peer_rank(fields: list) -> PeerRank:
    # (the view holds them for the whole window: model/untrack.py; the groups' status, new each pass)
    sent = fields[_ENTRIES_AT]
    if type(sent) is tuple:  # (templates, kind_of, numbers)
        fields[_ENTRIES_AT] = untracked_rows_of_kinds(Entry, sent[0], sent[1], sent[2], _NUMBER_SLOTS)
    else:
        fields[_ENTRIES_AT] = untracked_rows(Entry, sent)
    untrack_plain((fields[_PG_STATUS_AT],))
    return PeerRank(*fields)


_PEER_RANK_FIELDS = tuple(f.name for f in dataclass_fields(PeerRank))
_ENTRIES_AT = _PEER_RANK_FIELDS.index("entries")
_PG_STATUS_AT = _PEER_RANK_FIELDS.index("pg_status")
_KINDS_AT = _PEER_RANK_FIELDS.index("kinds")
_NUMBER_SLOTS, _KIND_SLOTS = NUMBER_AT, KIND_AT  # (COLUMNS' places are Entry's: it is Entry's less the frames)
_DISCOVERED_NUMBERS = [NUMBER_COLUMNS.index(c) for c in ("time_started_ns", "time_completed_ns")]
_DURATION_NUMBER = NUMBER_COLUMNS.index("duration_ms")


@dataclass
class Dropped:
    """What a body held that was not read, and the first reason: the source logs and counts it."""

    ranks: int = 0  # malformed ranks, rank ids no job has, a rank sent twice
    over_cap: int = 0  # ranks past `max_ranks` in one body: never parsed
    rows: int = 0
    reason: str = ""

    def note(self, what: str) -> None:
        self.reason = self.reason or what[:200]


def parse_body(body: bytes, source: str, intern: dict | None = None,
               max_ranks: int = MAX_WORLD) -> tuple[int, list[PeerRank], Dropped, bool]:
    """(the peer's clock, its ranks, what was dropped, whether it suspects a stall); raises DecodeError
    when the body is not the format.
    `intern`: sizes and dtypes already seen. Only the first `max_ranks` ranks are read: a peer sending
    4096 fake ranks costs the view no more than its share (the source decides the share)."""
    if intern is None or len(intern) > MAX_INTERNED:
        if intern is None:
            intern = {}
        else:
            intern.clear()
    typed = _typed_body(body, max_ranks)
    if typed is not None:  # the columns' types held: the rows are checked tuples (module doc)
        doc, raw_ranks, typed_rows = typed, typed["ranks"], True
    else:
        try:
            doc = loads(body, source)  # the one JSON decoder (msgspec)
        except DecodeError as exc:
            raise DecodeError(source, "bad_peer_body", f"{exc.reason}: {exc.detail}") from None
        raw_ranks, typed_rows = (doc.get("ranks") if isinstance(doc, dict) else None), False
    try:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(raw_ranks, list):
            raise ValueError(f"not a format-{FORMAT} peers body")
        now_ns = opt_int(doc.get("now_ns"))
    except (ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(source, "bad_peer_body", f"{type(exc).__name__}: {exc}") from None
    dropped, out, seen = Dropped(), [], set()
    if len(raw_ranks) > max_ranks:
        dropped.over_cap = len(raw_ranks) - max_ranks
        dropped.note(f"{len(raw_ranks)} ranks in one body, over the {max_ranks} read")
    for r in raw_ranks[:max_ranks]:
        try:
            pr = _rank(r, intern, typed_rows)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, AttributeError) as exc:
            dropped.ranks += 1
            dropped.note(f"a rank: {type(exc).__name__}: {exc}")
            continue
        if pr.rank in seen:
            dropped.ranks += 1
            dropped.note(f"rank {pr.rank} sent twice in one body")
            continue
        seen.add(pr.rank)
        dropped.rows += pr.rows_dropped
        if pr.rows_dropped:
            dropped.note(f"rank {pr.rank}: {pr.rows_dropped} rows out of the field rules")
        out.append(pr)
    return now_ns or 0, out, dropped, doc.get("stall_suspected") is True


def _rank(r: dict, intern: dict, typed: bool) -> PeerRank:
    rank = r["rank"]
    if not is_rank(rank):
        raise ValueError(f"rank {str(rank)[:24]}: no job has it (0 to {MAX_WORLD - 1})")
    epoch = r["epoch"]
    if type(epoch) is not int or not _LO <= epoch <= _HI:
        raise ValueError("epoch: not a 64-bit integer")
    pg_config, pg_runs = None, None
    if r.get("pg_config") is not None:
        groups = r["pg_config"][:MAX_GROUPS]
        runs = [_runs(ranks) if type(ranks) is dict else None for _, _, ranks in groups]
        pg_config = tuple(ProcessGroupConfig(str(n)[:MAX_NAME], str(d)[:MAX_NAME],
                                             None if type(ranks) is dict else _members(ranks, intern))
                          for n, d, ranks in groups)
        pg_runs = tuple(runs) if any(x is not None for x in runs) else None
    ws = r.get("world_size")
    kinds: Kinds | None = None
    entries: Sequence[Entry]
    if "kinds" in r:  # (model/peer_rows.NUMBER_COLUMNS)
        if typed:
            entries, bad, kinds = _typed_kind_rows(r["kinds"], r["entries"], intern)
        else:
            entries, bad = _rows(_kind_rows(r["kinds"], r["entries"]), intern)
    else:
        entries, bad = (_typed_rows if typed else _rows)(r["entries"], intern)
    dumped = r.get("dumped_at_ns")
    return PeerRank(rank, epoch, dumped if type(dumped) is int and 0 < dumped <= _HI else None,
                    ws if is_world_size(ws) else None, opt_int(r.get("first")), bool(r.get("full")),
                    _opt_str(r.get("version")), _opt_str(r.get("comm_lib_version")), pg_config,
                    # a row without an integer pg_id (found by mypy: a null one became the key "None") is dropped,
                    # and so is one whose pg_id is outside 64 bits (it became None the same way)
                    tuple(ProcessGroupStatus(s[0], opt_int(s[1]), opt_int(s[2]), opt_int(s[3]))
                          for s in (r.get("pg_status") or ())[:MAX_GROUPS]
                          if isinstance(s, list) and len(s) == 4 and type(s[0]) is int and _LO <= s[0] <= _HI),
                    frozenset(str(h)[:64] for h in (r.get("handlers") or ())[:16]),
                    tuple(entries), bad, pg_runs, kinds)


def _rows(rows: list, intern: dict) -> tuple[list[Entry], int]:
    """A rank's rows read the general way, one by one: (the entries, how many rows were dropped)."""
    entries, bad = [], 0
    for row in rows:
        try:
            entries.append(_entry(row, intern))
        except (ValueError, TypeError, IndexError, OverflowError):
            bad += 1
    return entries, bad


def _kind_rows(kinds: list, rows: list) -> list:
    """Rows sent as kinds (model/peer_rows.NUMBER_COLUMNS), each as the whole row it stands for, for _rows: one
    that is not [a kind's index, *numbers] stays None, which _rows drops and counts."""
    if type(kinds) is not list or type(rows) is not list:
        raise ValueError("kinds and their rows: not lists")
    out: list[list | None] = []
    for row in rows:
        kind = kinds[row[0]] if type(row) is list and len(row) == _NUMBERS + 1 and type(row[0]) is int and \
            0 <= row[0] < len(kinds) else None
        if type(kind) is not list or len(kind) != _N - _NUMBERS:
            out.append(None)
            continue
        whole = [None] * _N
        for at, v in zip(_KIND_SLOTS, kind):
            whole[at] = v
        for at, v in zip(_NUMBER_SLOTS, row[1:]):
            whole[at] = v
        out.append(whole)
    return out


def _entry(row: list, intern: dict) -> Entry:
    """One row by the dump's field rules: a required field out of shape or range drops the row (ValueError),
    an optional one is absent."""
    if type(row) is not list or len(row) != _N:
        raise ValueError(f"an entry row of {len(row) if isinstance(row, list) else type(row).__name__} columns")
    ints = _INTS(row)
    if tuple(map(type, ints)) != _INT_TYPES:
        raise ValueError(f"{next(COLUMNS[i] for i in sorted(_INT) if type(row[i]) is not int)}: not an integer")
    if min(ints) < _LO or max(ints) > _HI:
        raise ValueError("an integer outside 64 bits")
    strs = _STRS(row)
    if tuple(map(type, strs)) != _STR_TYPES:
        raise ValueError(f"{next(COLUMNS[i] for i in sorted(_STR) if type(row[i]) is not str)}: not a string")
    if max(map(len, strs)) > MAX_NAME:
        raise ValueError(f"a name over {MAX_NAME} characters")
    if type(row[_IS_P2P]) is not bool:
        raise ValueError("is_p2p: not a boolean")
    if row[_RETIRED] is not None and type(row[_RETIRED]) is not bool:
        row[_RETIRED] = None
    for i in _OPT_INT:
        v = row[i]
        if v is not None and (type(v) is not int or not _LO <= v <= _HI):
            row[i] = opt_int(v)
    for i in _DISCOVERED:
        if row[i] is not None:
            row[i] = discovered_ns(row[i])
    if row[_DURATION] is not None:
        row[_DURATION] = duration_ms(row[_DURATION]) if type(row[_DURATION]) in (int, float) else None
    for i in _THREAD:
        if row[i] is not None and (type(row[i]) is not str or len(row[i]) > MAX_NAME):
            row[i] = None
    n = 0
    for i in _SIZES:
        key: tuple = tuple(map(tuple, row[i]))
        sizes = intern.get(key)
        if sizes is None:  # checked once per distinct value, then shared
            if not all(type(x) is int and _LO <= x <= _HI for s in key for x in s):
                raise ValueError(f"{COLUMNS[i]}: not lists of 64-bit integers")
            sizes = intern[key] = key
        n += sum(map(len, sizes))
        row[i] = sizes
    if n > MAX_SIZE_ELEMENTS:
        raise ValueError(f"over {MAX_SIZE_ELEMENTS} tensor dimensions")
    for i in _DTYPES:
        if len(row[i]) > MAX_DTYPES:
            raise ValueError(f"over {MAX_DTYPES} dtypes")
        key = tuple(map(str, row[i]))
        row[i] = intern.setdefault(key, key)
    row += _NO_FRAMES
    return _new_tuple(Entry, row)


# ---------------------------------------------------------------------------------------------------------
# The typed way: a row's columns as types msgspec checks in C

_I64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
_NAME_T = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]
_SIZES_T = tuple[tuple[_I64, ...], ...]
_DTYPES_T = Annotated[tuple[str, ...], msgspec.Meta(max_length=MAX_DTYPES)]
# per column, the type a row that needs no rule but these has (model/peer_rows.COLUMNS' order)
_COLUMN_TYPES: dict[str, Any] = {
    "record_id": _I64, "pg_id": _I64, "pg_name": _NAME_T, "pg_desc": _NAME_T, "collective_seq_id": _I64,
    "p2p_seq_id": _I64, "op_id": _I64 | None, "is_p2p": bool, "profiling_name": _NAME_T, "backend": _NAME_T,
    "op": _NAME_T, "p2p_src": _I64 | None, "p2p_dst": _I64 | None, "input_sizes": _SIZES_T,
    "output_sizes": _SIZES_T, "input_dtypes": _DTYPES_T, "output_dtypes": _DTYPES_T, "state": _NAME_T,
    "retired": bool | None, "time_created_ns": _I64, "time_started_ns": _I64 | None,
    "time_completed_ns": _I64 | None, "duration_ms": float | None, "timeout_ms": _I64 | None,
    "thread_id": _NAME_T | None, "thread_name": _NAME_T | None}
_ROWS = msgspec.json.Decoder(list[tuple[tuple(_COLUMN_TYPES[c] for c in COLUMNS)]])  # type: ignore[misc]
# rows sent as kinds: each kind's columns, and each row's kind (an index: its bound is checked per rank) and numbers
_KINDS = msgspec.json.Decoder(list[tuple[tuple(_COLUMN_TYPES[c] for c in KIND_COLUMNS)]])  # type: ignore[misc]
_KIND_ROWS = msgspec.json.Decoder(list[tuple[(Annotated[int, msgspec.Meta(ge=0)],)  # type: ignore[misc]
                                             + tuple(_COLUMN_TYPES[c] for c in NUMBER_COLUMNS)]])
_PLAIN = msgspec.json.Decoder()
# interned as well as the sizes: the dtypes, and the names every entry of a group repeats (one object
# each, pickled once per body by the decoders and held once by the view)
_SHARED = _DTYPES + sorted(_STR) + _THREAD
# a kind's template (_template) is made of its columns, its shared ones interned, the numbers (None), the frames and
# call site: in Entry's order by one itemgetter
_SHARED_COLUMNS = tuple(COLUMNS[i] for i in _SIZES + _SHARED)
_SHARED_OF = itemgetter(*(KIND_COLUMNS.index(c) for c in _SHARED_COLUMNS))
_NO_NUMBERS = (None,) * len(NUMBER_COLUMNS) + _NO_FRAMES
_PARTS = KIND_COLUMNS + tuple("interned " + c for c in _SHARED_COLUMNS) + NUMBER_COLUMNS + ("frames", "call_site")
_KIND_PLACES = itemgetter(*(_PARTS.index("interned " + f if f in _SHARED_COLUMNS else f) for f in Entry._fields))


class _Body(msgspec.Struct, gc=False):
    """The body's fields, each rank's kept as the spans of the body its values take."""

    format: Any = None
    now_ns: Any = None
    stall_suspected: Any = None
    ranks: list[dict[str, msgspec.Raw]] | None = None


_BODY = msgspec.json.Decoder(_Body)


def _typed_body(body: bytes, max_ranks: int) -> dict | None:
    """The body as the general way reads it, with each of its first `max_ranks` ranks' rows as typed
    tuples (the ranks past those are left unread, as there); None where any value is not of its
    column's type, or the body is not strict JSON: the general way reads it, and says why."""
    if not typed_decodable(body):
        return None
    try:
        doc = _BODY.decode(body)
        if doc.ranks is None:
            return None
        ranks: list[Any] = [_typed_rank(r) for r in doc.ranks[:max_ranks]]
    except (msgspec.DecodeError, RecursionError):  # (a ValidationError is a DecodeError)
        return None
    ranks += doc.ranks[max_ranks:]  # (counted, never read)
    return {"format": doc.format, "now_ns": doc.now_ns, "stall_suspected": doc.stall_suspected, "ranks": ranks}


def _typed_rank(r: dict[str, msgspec.Raw]) -> dict:
    """A rank's fields, its rows (or kinds and rows) as typed tuples; raises a DecodeError where not of their
    types, or where a row names a kind the rank did not send."""
    if "kinds" not in r:
        return {k: _ROWS.decode(v) if k == "entries" else _PLAIN.decode(v) for k, v in r.items()}
    out = {k: _KIND_ROWS.decode(v) if k == "entries" else _KINDS.decode(v) if k == "kinds" else _PLAIN.decode(v)
           for k, v in r.items()}
    if out.get("entries") and max(map(itemgetter(0), out["entries"])) >= len(out["kinds"]):
        raise msgspec.ValidationError("a row names no kind the rank sent")  # (the general way drops that row)
    return out


def _typed_kind_rows(kinds: list[tuple], rows: list[tuple],
                     intern: dict) -> tuple[tuple[Entry, ...], int, Kinds | None]:
    """_typed_rows for rows sent as kinds: each kind's template (its names and shapes interned, its dimensions
    bounded) made once per body, the rows' numbers by the rules no type says column by column, each entry its
    kind's template with its numbers (model/_rows.c); rows of a kind over MAX_SIZE_ELEMENTS dimensions dropped.
    Also what the decoders hand the view (PeerRank.kinds)."""
    # (a kind over the bound has no template: no row kept names it, and the C leaves such a body to Python)
    templates = tuple(_template(kind, intern) for kind in kinds)
    over = {k for k, t in enumerate(templates) if t is None}
    kept = [row for row in rows if row[0] not in over] if over else rows
    if not kept:
        return (), len(rows), None
    kind_of, *numbers = zip(*kept)
    for j in _DISCOVERED_NUMBERS:
        numbers[j] = _discovered(numbers[j])
    numbers[_DURATION_NUMBER] = _durations(numbers[_DURATION_NUMBER])
    entries = untracked_rows_of_kinds(Entry, templates, kind_of, numbers, _NUMBER_SLOTS)  # type: ignore[arg-type]
    return entries, len(rows) - len(kept), (entries, templates, kind_of, numbers)  # type: ignore[return-value]


def _discovered(col: tuple) -> tuple:
    """A typed column of discovery times by fields.discovered_ns (0 or less: "not yet"), column-wise."""
    if min(compress(col, map(is_not, col, repeat(None))), default=1) > 0:
        return col
    return tuple(None if v is not None and v <= 0 else v for v in col)


def _durations(col: tuple) -> tuple:
    """A typed column of durations (floats: the type says so) by fields.duration_ms, column-wise."""
    timed = list(compress(col, map(is_not, col, repeat(None))))
    if not timed or (0 <= min(timed) and max(timed) < MAX_DURATION_MS):
        return col
    return tuple(None if v is None else duration_ms(v) for v in col)


def _template(kind: tuple, intern: dict) -> tuple | None:
    """A kind's entry with its numbers None, its names and shapes interned (C-level steps: a body's ranks
    have ~4 kinds each, rarely one another's, their threads apart); None where over MAX_SIZE_ELEMENTS
    dimensions."""
    shared = _SHARED_OF(kind)
    t = _KIND_PLACES(kind + tuple(map(intern.setdefault, shared, shared)) + _NO_NUMBERS)
    return None if sum(map(len, t[_SIZES[0]])) + sum(map(len, t[_SIZES[1]])) > MAX_SIZE_ELEMENTS else t


def _typed_rows(rows: list[tuple], intern: dict) -> tuple[list[Entry], int]:
    """_rows for rows whose columns are of their types already: the rules no type says, and interning.
    Column by column, in C-level passes (a first pass of a 16384-rank view reads ~4 million rows; row by
    row this loop was half of the decoders' CPU); rows of more than MAX_SIZE_ELEMENTS dimensions, a
    hostile peer's, are dropped one by one."""
    if not rows:
        return [], 0
    cols: list = list(zip(*rows))
    for i in _DISCOVERED:
        cols[i] = _discovered(cols[i])
    cols[_DURATION] = _durations(cols[_DURATION])
    for i in _SIZES + _SHARED:
        col = cols[i]
        cols[i] = list(map(intern.setdefault, col, col))
    if _most_dimensions(cols[_SIZES[0]]) + _most_dimensions(cols[_SIZES[1]]) > MAX_SIZE_ELEMENTS:
        return _typed_rows_over(cols)
    n = len(rows)
    cols += (repeat((), n), repeat(None, n))  # (_NO_FRAMES)
    return list(map(_new_tuple, repeat(Entry), zip(*cols))), 0


def _most_dimensions(sizes: list[tuple[tuple[int, ...], ...]]) -> int:
    """The most tensor dimensions any one of these (interned: each distinct value once) lists."""
    return max(sum(map(len, s)) for s in {id(s): s for s in sizes}.values())


def _typed_rows_over(cols: list) -> tuple[list[Entry], int]:
    """_typed_rows' columns where a row may list more than MAX_SIZE_ELEMENTS dimensions: those dropped."""
    entries, bad = [], 0
    for row in zip(*cols):
        if sum(map(len, row[_SIZES[0]])) + sum(map(len, row[_SIZES[1]])) > MAX_SIZE_ELEMENTS:
            bad += 1
            continue
        entries.append(_new_tuple(Entry, row + _NO_FRAMES))
    return entries, bad


def _members(ranks, intern: dict) -> tuple[int, ...] | None:
    """A group's member ranks, one shared tuple per distinct list: every rank of a 4096-rank job lists
    the default group's 4096 members. A list naming a rank no job has is unknown (None), as in a dump
    (fields.parse_ranks): member 1000000000 sized the analysis' sets."""
    if ranks is None or type(ranks) is not list or len(ranks) > MAX_WORLD:
        return None
    members = tuple(ranks)
    if not all(is_rank(x) for x in members):
        return None
    return intern.setdefault(("members", members), members)


Runs = tuple[tuple[int, int, int], ...]


def _runs(value: dict) -> Runs | None:
    """{"runs": [[first, count, step], ...]} (model/peer_rows.member_runs), checked as a member list is:
    ranks a job can have, at most a world of them; None (members unknown) otherwise."""
    runs = value.get("runs")
    if type(runs) is not list or len(runs) > MAX_WORLD:
        return None
    out, total = [], 0
    for run in runs:
        if type(run) is not list or len(run) != 3 or tuple(map(type, run)) != (int, int, int):
            return None
        first, count, step = run
        total += count
        if count < 1 or step < 1 or total > MAX_WORLD or not is_rank(first) or not is_rank(first + (count - 1) * step):
            return None
        out.append((first, count, step))
    return tuple(out)


def _opt_str(v) -> str | None:
    return None if v is None else str(v)[:MAX_NAME]
