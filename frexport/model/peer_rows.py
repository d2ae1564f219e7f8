"""The columns of the peers endpoint (/api/v1/ranks): an entry as one JSON array, in this order.

Shared by the sidecar that serves its ranks (export/peer_api.py) and the job-level view that reads
them (decode/peer_rows.py). Frames are never sent: the live window carries none (JSON handlers have
no stacks); the view fetches a rank's pickle when it needs call sites.
"""

from __future__ import annotations

from frexport.model.dump import Entry

FORMAT = 1
COLUMNS: tuple[str, ...] = tuple(f for f in Entry._fields if f not in ("frames", "call_site"))
