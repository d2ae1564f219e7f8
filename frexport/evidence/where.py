"""The job bundle's summary: where the ranks are, grouped, and the line each culprit hangs on.

Where a rank is now comes from its stack by the one rule (analysis/whereabouts.py's `now_frame`),
read by the one parser (decode/stacks.py), as in the pod's bundle and `frexport analyze`.
"""

from __future__ import annotations

from frexport.analysis.engine import format_ranks
from frexport.analysis.whereabouts import now_frame
from frexport.decode.stacks import rank_threads
from frexport.evidence.fetch import Stacks
from frexport.model.call_site import frame_text, site_text
from frexport.model.dump import Entry, RankDump
from frexport.model.outcome import waited_in


def now_line(texts: dict[str, str]) -> str | None:
    """The user's line a rank is on, from the stack texts fetched for it (its traceback, else py-spy's)."""
    frame = now_frame(rank_threads(texts))
    return frame_text(frame) if frame is not None else None


def hang_line(traceback: str) -> str | None:
    """The user's line a rank is on, from its faulthandler traceback (PyTorch's dump_traceback)."""
    return now_line({"traceback": traceback})


def where_ranks(dumps: dict[int, RankDump], framed: dict[int, RankDump], stacks: Stacks,
                culprits: set[int]) -> list[str]:
    """Ranks grouped by where they are: the collective each waits in (its call site, from any rank whose
    frames were fetched), else the last one it issued and, from its stack, the line it is on now."""
    sites: dict[tuple[str, int, bool], str] = {}
    for d in framed.values():
        for e in d.entries:
            if e.call_site is not None:
                sites.setdefault((e.pg_name, e.seq_id, e.is_p2p), site_text(e.call_site) or "")
    groups: dict[str, list[int]] = {}
    for rank, d in dumps.items():
        waiting = next(iter(waited_in(d.entries)), None)
        if waiting is not None and rank not in culprits:
            key = (f"wait in {waiting.op} ({_coll(waiting)} of group {waiting.pg_name} ({waiting.pg_desc}))"
                   + (f" at {site}" if (site := sites.get((waiting.pg_name, waiting.seq_id, waiting.is_p2p)))
                      else ""))
        else:
            last = d.entries[-1] if d.entries else None
            key = (f"after {last.op} ({_coll(last)} of group {last.pg_name} ({last.pg_desc}))" if last
                   else "before any collective")
            line = now_line(stacks.get(rank, {}))
            key += f", now at {line}" if line else ", next (stack not fetched)"
        groups.setdefault(key, []).append(rank)
    out = []
    for key, ranks in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({format_ranks(ranks)})"
        out.append(f"{who} {key}" if key.startswith("wait") else f"{who}: {key}")
    return out


def _coll(e: Entry) -> str:
    return f"{'p2p op' if e.is_p2p else 'collective'} {e.seq_id}"
