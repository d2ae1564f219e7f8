"""Which peer the job-level view believes for each rank (issue 28), and how many ranks each may send.

A rank belongs to the first peer that claimed it alone, for as long as that peer keeps sending it.
Another peer claiming an owned rank, or two peers claiming a new rank at once, is a collision: logged
(one line per set of peers, once), counted and kept for the job bundle, never merged; a rank that two
claim with no owner yet is used from neither (we cannot tell which is true). Shares are max-min fair:
a peer with 4096 fake ranks gets what the others leave of `max_ranks`, never their ranks' places.
"""

from __future__ import annotations

from frexport import logs
from frexport.model.peer_rows import collision_text


class Owners:
    def __init__(self) -> None:
        self.owner: dict[int, str] = {}  # rank -> the peer whose claim the view uses
        self.claims: dict[str, frozenset[int]] = {}  # peer -> the ranks it sent at its last answer (its share)
        # rank -> (the owner whose claim is used, or None: neither), every other peer claiming it
        self.collisions: dict[int, tuple[str | None, tuple[str, ...]]] = {}
        self.collisions_total = 0  # new (rank, peer) collisions since start
        self._said: set[tuple[int, str]] = set()  # collisions already logged
        # the claims the owners were last settled on (None: an owner released since): settling the same
        # claims again changes nothing, and a 16384-rank view's pass of the same claims took ~0.1 s
        self._settled: dict[str, frozenset[int]] | None = None

    def release(self, peer: str, rank: int) -> bool:
        """The peer lets go of the rank; True when it owned it."""
        if self.owner.get(rank) == peer:
            del self.owner[rank]
            self._settled = None
            return True
        return False

    def settle(self) -> list[tuple[str, int]]:
        """Owners after the latest claims; returns the (peer, rank) pairs whose owner stopped claiming them."""
        if self.claims == self._settled:
            return []
        self._settled = dict(self.claims)
        claimants: dict[int, list[str]] = {}
        ranks: frozenset[int] | list[int]  # (for mypy) a peer's claim, then the ranks of one set of peers
        who: list[str] | str  # a rank's claimants, then the line that names them
        for peer, ranks in sorted(self.claims.items()):
            for r in ranks:
                claimants.setdefault(r, []).append(peer)
        gone = [(owner, r) for r, owner in self.owner.items() if owner not in claimants.get(r, ())]
        for _, r in gone:
            del self.owner[r]
        collisions: dict[int, tuple[str | None, tuple[str, ...]]] = {}
        new: dict[tuple[str | None, tuple[str, ...]], list[int]] = {}
        for r, who in claimants.items():
            owner = self.owner.get(r)
            if owner is None and len(who) == 1:
                self.owner[r] = who[0]
            elif len(who) > 1:
                others = tuple(p for p in who if p != owner)
                collisions[r] = (owner, others)
                fresh = [p for p in others if (r, p) not in self._said]
                self._said.update((r, p) for p in fresh)
                self.collisions_total += len(fresh)
                if fresh:
                    new.setdefault((owner, others), []).append(r)
        for (owner, others), ranks in sorted(new.items(), key=lambda kv: kv[1][0])[:16]:  # one line per set of peers
            who = ", ".join(([owner] if owner else []) + list(others))
            shown = ", ".join(map(str, sorted(ranks)[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
            logs.get().warning("rank%s %s %s claimed by peers %s: %s", "s" if len(ranks) > 1 else "", shown,
                               "are" if len(ranks) > 1 else "is", who, collision_text(owner))
        self._said = {(r, p) for (r, p) in self._said if r in collisions}  # said again if it recurs later
        self.collisions = collisions
        return gone


def fair_shares(demand: dict[str, int], total: int) -> dict[str, int]:
    """Max-min fair shares of `total` ranks: every peer gets what it asks up to an equal share, and
    what the modest ones leave is shared again among the others (a pod of 8 ranks always gets 8 as
    long as the job fits `total`; a peer asking 4096 gets what is left)."""
    out: dict[str, int] = {}
    left, todo = total, sorted(demand, key=lambda p: (demand[p], p))
    while todo:
        share = left // len(todo)
        p = todo[0]
        if demand[p] <= share:
            out[p] = demand[p]
        else:  # every one left asks more than an equal share: equal shares, the remainder by name
            for i, q in enumerate(sorted(todo)):
                out[q] = share + (1 if i < left - share * len(todo) else 0)
            return out
        left -= out[p]
        todo.pop(0)
    return out
