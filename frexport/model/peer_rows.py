"""The columns of the peers endpoint (/api/v1/ranks): an entry as one JSON array, in this order.

Shared by the sidecar that serves its ranks (export/peer_api.py) and the job-level view that reads
them (decode/peer_rows.py). Frames are never sent: the live window carries none (JSON handlers have
no stacks); the view fetches a rank's pickle when it needs call sites.
"""

from __future__ import annotations

from frexport.model.dump import Entry

FORMAT = 1
COLUMNS: tuple[str, ...] = tuple(f for f in Entry._fields if f not in ("frames", "call_site"))


def collision_text(owner: str | None) -> str:
    """What the job-level view does with a rank two peers claim (sources/peers.py): said in its log
    and in the job bundle in the same words."""
    return (f"only {owner}'s claim is used (its first owner)" if owner else
            "no peer owned it before, so neither claim is used until one stops")
