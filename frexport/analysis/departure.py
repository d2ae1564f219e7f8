"""Ranks that left the job: which member vanished from a collective that some members failed out of.

A collective ends on some members and not on others only when it fails. When no disagreement
explains the failure (sizes that cannot add up, a member that passed other tensors), a member
vanished from it (killed, OOM, a crash): its peers that were talking to it fail out, the rest keep
waiting. The members that failed out are victims, never culprits. The one that vanished is among
the members that did not fail out, and two things narrow it down:

- the ring: gloo's all_reduce (and NCCL's ring algorithms) pass data around the group's members in
  group-rank order, so a rank that dies is seen by its two ring neighbours first. A member whose
  ring neighbours are every member that failed out is the one that left. With four or fewer
  members two ranks can share the same neighbours (in a 4-ring, 0 and 2 both neighbour 1 and 3),
  and a tree or a butterfly (broadcast, barrier) fails other members: then the ring does not
  decide, and nothing is concluded from it.
- the stacks taken at the same look (`frexport snapshot --stacks`): a rank whose stack was taken
  answered, so it is alive; one whose stack is missing where every other rank's was taken did not
  answer. Where only some ranks' stacks are there (an evidence bundle keeps the stuck ranks'), the
  look says nothing of the others (engine `answered_but`). This only ever picks among candidates the
  recorder already gave; it never accuses a rank by itself.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from frexport.analysis.membership import Group


def ring_neighbours(group: Group, rank: int) -> set[int]:
    members = group.members
    if rank not in members or len(members) < 2:
        return set()
    i = members.index(rank)
    return {members[i - 1], members[(i + 1) % len(members)]} - {rank}


def vanished(group: Group, failed: Collection[int], candidates: Iterable[int],
             alive: Collection[int] = ()) -> tuple[tuple[int, ...], list[str]]:
    """The candidates that may have vanished from `group`'s collective that `failed` failed out of,
    and the evidence that narrowed them (one phrase each)."""
    cands = sorted(set(candidates) - set(failed))
    why: list[str] = []
    by_ring = [c for c in cands if set(failed) <= ring_neighbours(group, c)]
    if by_ring and len(by_ring) < len(cands):
        cands = by_ring
        why.append(f"{_names(failed)} {'is' if len(failed) == 1 else 'are'} the ring "
                   f"neighbour{'s' if len(failed) > 1 else ''} of {_names(cands, ' or ')}")
    if alive:
        gone = [c for c in cands if c not in alive]
        if gone and len(gone) < len(cands):
            why.append(f"{_names(sorted(set(cands) - set(gone)))} answered with "
                       f"{'its stack' if len(cands) - len(gone) == 1 else 'their stacks'} at the same look, "
                       f"{_names(gone)} did not")
            cands = gone
    return tuple(cands), why


def _names(ranks: Iterable[int], sep: str = ", ") -> str:
    rs = sorted(set(ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) == 2 and sep == ", ":
        return f"ranks {rs[0]} and {rs[1]}"
    return "ranks " + sep.join(map(str, rs))
