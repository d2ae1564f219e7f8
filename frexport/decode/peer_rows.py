"""Reads a peer sidecar's /api/v1/ranks body (columns in model/peer_rows.py) into entries.

The body comes over the network from another pod: its size is capped by the client, and every row
is checked to have the columns' shapes before it becomes an `Entry`; a row that does not is an error
of that peer's body (DecodeError), never a crash of the view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from frexport.decode.errors import DecodeError
from frexport.model.dump import Entry, ProcessGroupConfig, ProcessGroupStatus
from frexport.model.peer_rows import COLUMNS, FORMAT

_N = len(COLUMNS)
_INT = {i for i, c in enumerate(COLUMNS) if c in ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id",
                                                   "time_created_ns")}
_STR = {i for i, c in enumerate(COLUMNS) if c in ("pg_name", "pg_desc", "profiling_name", "backend", "op", "state")}
_SIZES = [COLUMNS.index("input_sizes"), COLUMNS.index("output_sizes")]
_DTYPES = [COLUMNS.index("input_dtypes"), COLUMNS.index("output_dtypes")]


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


def parse_body(body: bytes, source: str) -> tuple[int, list[PeerRank]]:
    """(the peer's clock, its ranks); raises DecodeError."""
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} peers body")
        return _int(doc.get("now_ns")), [_rank(r) for r in doc["ranks"]]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise DecodeError(source, "bad_peer_body", f"{type(exc).__name__}: {exc}") from None


def _rank(r: dict) -> PeerRank:
    pg_config = None
    if r.get("pg_config") is not None:
        pg_config = tuple(ProcessGroupConfig(str(n), str(d), tuple(_int(x) for x in ranks) if ranks is not None
                                             else None) for n, d, ranks in r["pg_config"])
    ws = r.get("world_size")
    return PeerRank(_int(r["rank"]), _int(r["epoch"]), _opt_int(r.get("dumped_at_ns")),
                    _opt_int(ws), _opt_int(r.get("first")), bool(r.get("full")), _opt_str(r.get("version")),
                    _opt_str(r.get("comm_lib_version")), pg_config,
                    tuple(ProcessGroupStatus(*(_opt_int(x) for x in s)) for s in r.get("pg_status") or ()),
                    frozenset(str(h) for h in r.get("handlers") or ()), tuple(_entry(row) for row in r["entries"]))


def _entry(row: list) -> Entry:
    if type(row) is not list or len(row) != _N:
        raise ValueError(f"an entry row of {len(row) if isinstance(row, list) else type(row).__name__} columns")
    for i in _INT:
        if type(row[i]) is not int:
            raise ValueError(f"{COLUMNS[i]}: not an integer")
    for i in _STR:
        if type(row[i]) is not str:
            raise ValueError(f"{COLUMNS[i]}: not a string")
    for i in _SIZES:
        row[i] = tuple(tuple(_int(x) for x in s) for s in row[i])
    for i in _DTYPES:
        row[i] = tuple(str(x) for x in row[i])
    return Entry(*row, (), None)


def _int(v) -> int:
    if type(v) is not int:
        raise ValueError(f"expected an integer, got {type(v).__name__}")
    return v


def _opt_int(v) -> int | None:
    return None if v is None else _int(v)


def _opt_str(v) -> str | None:
    return None if v is None else str(v)
