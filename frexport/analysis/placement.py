"""Which ranks' records can speak for a collective: a collective completes only once every member issued
it, so a rank whose records of a group end before an op that another member completed and then went
past (it recorded a later op of the group) is not evidence of that op's absence. Its dump was taken
earlier than the others' (a poll of a busy job, a stale file: a rank that died after it), or it is not a
member of the group at all (a previous job's leftover, a planted file). Either way its absence from a
later op casts no vote on who is out of step (engine.py `_idle_root`), and where its rank lies beyond a
gap after the job's other ranks it does not stretch the job's world either (membership.py): such a dump
is an input error, never a voter. It still counts as absent: a rank that died after its dump was taken
left the job all the same.

Only completion that is proven counts (model/rank_trace.py FINISHED without ISSUED): an op a hooked
backend retired at issue proves nothing, and a gloo op a rank failed out of is not "went past" unless
the rank recorded another op of the group after it.
"""

from __future__ import annotations

from frexport.model.rank_trace import PROVEN_DONE_BYTE, RankTrace, compiled_behind, compiled_passed_through


def passed_through(traces: dict[int, RankTrace]) -> dict[str, int]:
    """Per group name, the newest seq some rank proved complete and then went past."""
    compiled = compiled_passed_through(list(traces.values()))
    if compiled is not NotImplemented:
        return compiled
    out: dict[str, int] = {}
    for t in traces.values():
        for name, g in t.groups.items():
            n = len(g.flags)
            if n < 2:
                continue
            i = g.flags.tobytes()[:-1].translate(PROVEN_DONE_BYTE).rfind(1)  # not the last: it went past it
            if i >= 0 and g.seq[i] > out.get(name, -1):
                out[name] = g.seq[i]
    return out


def behind(traces: dict[int, RankTrace], passed: dict[str, int] | None = None) -> dict[int, tuple[str, int]]:
    """Ranks whose records of some group end before an op another rank completed and went past:
    rank -> (that group, the first op its records lack)."""
    passed = passed_through(traces) if passed is None else passed
    compiled = compiled_behind(list(traces), list(traces.values()), passed)
    if compiled is not NotImplemented:
        return compiled
    out: dict[int, tuple[str, int]] = {}
    for rank, t in traces.items():
        for name, g in t.groups.items():
            p = passed.get(name)
            if p is not None and len(g.seq) and g.seq[-1] + 1 <= p:
                out[rank] = (name, g.seq[-1] + 1)
                break
    return out
