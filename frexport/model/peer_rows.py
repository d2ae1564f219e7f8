"""The columns of the peers endpoint (/api/v1/ranks): an entry as one JSON array, in this order.

Shared by the sidecar that serves its ranks (export/peer_api.py) and the job-level view that reads
them (decode/peer_rows.py). Frames are never sent: the live window carries none (JSON handlers have
no stacks); the view fetches a rank's pickle when it needs call sites.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter

from frexport.model.dump import Entry

FORMAT = 1
COLUMNS: tuple[str, ...] = tuple(f for f in Entry._fields if f not in ("frames", "call_site"))

# A rank's rows go as kinds when the client asks (`rows=kinds`): "kinds" lists each distinct KIND_COLUMNS
# part once, and each row of "entries" is [its kind's index, *its NUMBER_COLUMNS]. A busy rank's 20 new rows
# are ~4 kinds (one op after another): the body ~45 % smaller, and the view's decoders read the names, sizes
# and dtypes once per kind instead of once per row. The row it stands for is its kind's columns with its
# numbers in their places (decode/peer_rows.py reads it so).
NUMBER_COLUMNS: tuple[str, ...] = ("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
                                   "time_started_ns", "time_completed_ns", "duration_ms")
KIND_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c not in NUMBER_COLUMNS)
KIND_AT, NUMBER_AT = (tuple(COLUMNS.index(c) for c in names) for names in (KIND_COLUMNS, NUMBER_COLUMNS))


def collision_text(owner: str | None) -> str:
    """What the job-level view does with a rank two peers claim (sources/peers.py): said in its log
    and in the job bundle in the same words."""
    return (f"only {owner}'s claim is used (its first owner)" if owner else
            "no peer owned it before, so neither claim is used until one stops")


# A group's member list goes as runs when the client asks (`members=runs`): [[first, count, step], ...].
# A 16384-rank job's default group is one run instead of 16384 numbers, in every rank's answer: at that
# size the lists were most of the first pass's 2.6 GB. Lists this short are sent as they are.
RUNS_FROM = 16


def member_runs(ranks: Sequence[int]) -> list[list[int]]:
    """[[first, count, step], ...] that list `ranks` in order (count 1: step 1)."""
    runs: list[list[int]] = []
    i, n = 0, len(ranks)
    while i < n:
        j = i + 1
        if j < n and ranks[j] > ranks[i]:
            step = ranks[j] - ranks[i]
            while j + 1 < n and ranks[j + 1] - ranks[j] == step:
                j += 1
            runs.append([ranks[i], j - i + 1, step])
            i = j + 1
        else:
            runs.append([ranks[i], 1, 1])
            i = j
    return runs


def expand_runs(runs: Sequence[Sequence[int]]) -> tuple[int, ...]:
    return tuple(r for first, count, step in runs for r in range(first, first + count * step, step))


_KIND_OF, _NUMBERS_OF = itemgetter(*KIND_AT), itemgetter(*NUMBER_AT)


def by_kind(rows: Iterable[tuple]) -> tuple[list[tuple], list[list]]:
    """Rows (COLUMNS' order) as (kinds, short rows): see NUMBER_COLUMNS. Raises TypeError where a kind's
    values cannot be compared by hash (the rows then go whole)."""
    index: dict[tuple, int] = {}
    short = []
    for row in rows:
        kind = _KIND_OF(row)
        k = index.setdefault(kind, len(index))
        short.append([k, *_NUMBERS_OF(row)])
    return list(index), short
