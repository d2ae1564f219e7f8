"""Reads a peer sidecar's /api/v1/ranks body (columns in model/peer_rows.py) into entries.

The body comes over the network from another pod: its size is capped by the client, and every row
is checked to have the columns' shapes before it becomes an `Entry`; a row that does not is an error
of that peer's body (DecodeError), never a crash of the view.

A 4096-rank job sends ~80,000 rows a pass, so a row is checked with C-level maps rather than a Python
loop per column, and its sizes and dtypes are interned (`intern`, kept by the caller across bodies):
equal shapes are one object, which is also what lets the trace builder key signatures by identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from operator import itemgetter

from frexport.decode.errors import DecodeError
from frexport.model.dump import Entry, ProcessGroupConfig, ProcessGroupStatus
from frexport.model.peer_rows import COLUMNS, FORMAT

_N = len(COLUMNS)
_INT = {i for i, c in enumerate(COLUMNS) if c in ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id",
                                                   "time_created_ns")}
_STR = {i for i, c in enumerate(COLUMNS) if c in ("pg_name", "pg_desc", "profiling_name", "backend", "op", "state")}
_SIZES = [COLUMNS.index("input_sizes"), COLUMNS.index("output_sizes")]
_DTYPES = [COLUMNS.index("input_dtypes"), COLUMNS.index("output_dtypes")]
_INTS, _STRS = itemgetter(*sorted(_INT)), itemgetter(*sorted(_STR))
_INT_TYPES, _STR_TYPES = (int,) * len(_INT), (str,) * len(_STR)
_NO_FRAMES = ((), None)  # frames, call_site: the live window carries no stacks
_new_tuple = tuple.__new__
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


def parse_body(body: bytes, source: str, intern: dict | None = None) -> tuple[int, list[PeerRank]]:
    """(the peer's clock, its ranks); raises DecodeError. `intern`: sizes and dtypes already seen."""
    if intern is None or len(intern) > MAX_INTERNED:
        if intern is None:
            intern = {}
        else:
            intern.clear()
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} peers body")
        return _int(doc.get("now_ns")), [_rank(r, intern) for r in doc["ranks"]]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise DecodeError(source, "bad_peer_body", f"{type(exc).__name__}: {exc}") from None


def _rank(r: dict, intern: dict) -> PeerRank:
    pg_config = None
    if r.get("pg_config") is not None:
        pg_config = tuple(ProcessGroupConfig(str(n), str(d), _members(ranks, intern) if ranks is not None
                                             else None) for n, d, ranks in r["pg_config"])
    ws = r.get("world_size")
    return PeerRank(_int(r["rank"]), _int(r["epoch"]), _opt_int(r.get("dumped_at_ns")),
                    _opt_int(ws), _opt_int(r.get("first")), bool(r.get("full")), _opt_str(r.get("version")),
                    _opt_str(r.get("comm_lib_version")), pg_config,
                    tuple(ProcessGroupStatus(_int(s[0]), *map(_opt_int, s[1:])) for s in r.get("pg_status") or ()),
                    frozenset(str(h) for h in r.get("handlers") or ()),
                    tuple([_entry(row, intern) for row in r["entries"]]))


def _entry(row: list, intern: dict) -> Entry:
    if type(row) is not list or len(row) != _N:
        raise ValueError(f"an entry row of {len(row) if isinstance(row, list) else type(row).__name__} columns")
    if tuple(map(type, _INTS(row))) != _INT_TYPES:
        raise ValueError(f"{next(COLUMNS[i] for i in sorted(_INT) if type(row[i]) is not int)}: not an integer")
    if tuple(map(type, _STRS(row))) != _STR_TYPES:
        raise ValueError(f"{next(COLUMNS[i] for i in sorted(_STR) if type(row[i]) is not str)}: not a string")
    for i in _SIZES:
        key: tuple = tuple(map(tuple, row[i]))
        sizes = intern.get(key)
        if sizes is None:  # checked once per distinct value, then shared
            if not all(type(x) is int for s in key for x in s):
                raise ValueError(f"{COLUMNS[i]}: not lists of integers")
            sizes = intern[key] = key
        row[i] = sizes
    for i in _DTYPES:
        key = tuple(map(str, row[i]))
        row[i] = intern.setdefault(key, key)
    row += _NO_FRAMES
    return _new_tuple(Entry, row)


def _members(ranks: list, intern: dict) -> tuple[int, ...]:
    """A group's member ranks, one shared tuple per distinct list: every rank of a 4096-rank job lists
    the default group's 4096 members."""
    members = tuple(ranks)
    if not all(type(x) is int for x in members):
        raise ValueError("pg_config: member ranks must be integers")
    return intern.setdefault(("members", members), members)


def _int(v) -> int:
    if type(v) is not int:
        raise ValueError(f"expected an integer, got {type(v).__name__}")
    return v


def _opt_int(v) -> int | None:
    return None if v is None else _int(v)


def _opt_str(v) -> str | None:
    return None if v is None else str(v)
