"""Each trace's signatures as canonical ids (model/signature.canonical), numbered once for the process.

Matching compares the ranks' ops by their canonical forms, as small ints. Each pass of a job-level view
numbered every signature of every rank afresh (a hash of nested tuples each: about 0.1 s of a 16384-rank
pass). A trace's signatures only grow (rows are interned as they are appended; a rebuild makes a new
trace), so its ids are kept with it and extended, against one numbering shared by every trace. The
numbering is bounded: an analysis that finds more than MAX_IDS forms starts a new one (a new generation),
and every trace's ids are made again as it is next asked. Only equality of ids is ever read, never their
values, so a diagnosis does not depend on the numbering.
"""

from __future__ import annotations

from frexport.model.rank_trace import RankTrace
from frexport.model.signature import Signature, canonical

MAX_IDS = 4096

_ids: dict[tuple, int] = {}  # canonical form -> id
_of_sig: dict[Signature, int] = {}  # ranks share most signatures: each canonical form is made once
_generation = 0


def start_analysis() -> None:
    """Called before an analysis numbers its traces: a numbering grown past its bound starts again here,
    never in the middle of one analysis (whose ids must all come from one numbering)."""
    global _generation
    if len(_ids) > MAX_IDS:
        _ids.clear()
        _of_sig.clear()
        _generation += 1


def signature_ids(t: RankTrace) -> tuple[list[int], bytes | None]:
    """The canonical id of each of t.signatures, and where every index and id fits in a byte, the 256-byte
    table from a signature's index to its id (bytes.translate turns a column of indices into ids in C)."""
    memo, ids = t.signature_ids, []
    if memo is not None and memo[0] == _generation:  # (a new numbering: every id made again)
        if len(memo[1]) == len(t.signatures):
            return memo[1], memo[2]
        ids = memo[1]
    ids = ids + [_id(sig) for sig in t.signatures[len(ids):]]
    table = bytes(ids) + bytes(256 - len(ids)) if len(ids) <= 256 and max(ids, default=0) < 256 else None
    t.signature_ids = (_generation, ids, table)
    return ids, table


def _id(sig: Signature) -> int:
    i = _of_sig.get(sig)
    if i is None:
        i = _of_sig[sig] = _ids.setdefault(canonical(sig), len(_ids))
    return i
