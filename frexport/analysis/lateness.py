"""Stragglers as findings: one per source of delay.

A rank that reaches collectives late holds back its peers; a peer that waited for it reaches its next
collective late by as much, in another group too (tp then dp). `straggler.inherited_waits` takes that
inherited lateness off, so the peers are not named; the late rank gets one finding, in the group where
it is latest, blocking the peers of every group it is late in. A snapshot that catches its peers waiting
for it is that lateness seen once, said under it (`late_not_hung`), not a second fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from frexport.analysis import findings as F
from frexport.analysis.findings import Finding
from frexport.analysis.matching import SigIds
from frexport.analysis.straggler import Straggler, find_stragglers, inherited_waits
from frexport.model.call_site import site_text
from frexport.model.rank_trace import GroupTrace, RankTrace
from frexport.model.signature import op_name

if TYPE_CHECKING:  # the engine imports this module
    from frexport.analysis.engine import Options, _Context


@dataclass
class StragglerMemo:
    """The stragglers of a live analysis's last pass, and what they were judged from. While no trace moves
    (a hung job, every pass until it is restarted) they are the same: judging every group again was most of
    such a pass. The key holds each trace's identity and rows' version (RankTrace.rows_version), so it keeps
    the traces themselves: an identity stays theirs."""

    key: tuple = ()
    traces: tuple[RankTrace, ...] = ()
    found: list[Straggler] = field(default_factory=list)


def straggler_findings(ctx: _Context, all_cols: dict[str, dict[int, tuple[GroupTrace, SigIds]]], exclude: set[int],
                       options: Options, memo: StragglerMemo | None = None) -> list[Finding]:
    """One finding per late rank (`ctx`, `options`: the engine's): see the module doc."""
    best: dict[int, Straggler] = {}
    every: dict[int, list] = {}
    for s in _judged(ctx, all_cols, int(options.straggler_lateness_s * 1e9), memo):
        if s.rank not in exclude:
            every.setdefault(s.rank, []).append(s)
            if s.rank not in best or s.median_lateness_ns > best[s.rank].median_lateness_ns:
                best[s.rank] = s
    out = []
    for rank, s in sorted(best.items()):
        # one finding per source of delay: the rank, in the group where it is latest, holding back
        # the peers of every group it is late in
        held = sorted({r for x in every[rank] for r in x.group.members} - {rank})
        also = [f"also late in group {x.group.label}: a median {x.median_lateness_ns / 1e6:.0f} ms"
                for x in every[rank] if x is not s]
        entry = ctx.entry(rank, s.group, s.first_seq)
        sig, site = (entry[0], entry[1]) if entry else ((), None)
        how = "shorter collective durations" if s.by_duration else "later enqueue times"
        out.append(Finding(
            F.STRAGGLER, s.group.name, s.group.desc, s.first_seq, (rank,),
            tuple(held), op_name(sig) if sig else None, site_text(site),
            f"rank {rank} reaches collectives of group {s.group.label} a median {s.median_lateness_ns / 1e6:.0f} ms "
            f"after its peers and is the last to arrive in {s.late_fraction:.0%} of the last {s.samples} "
            f"(from {how}); its peers wait for it", tuple(also), False, None,
            f"judged from the last {s.samples} collectives of the group, by {how}"
            + "; lateness a rank inherits from a peer it waited for in its previous collective is not counted"))
    return out


def _judged(ctx: _Context, all_cols: dict[str, dict[int, tuple[GroupTrace, SigIds]]], lateness_ns: int,
            memo: StragglerMemo | None) -> list[Straggler]:
    """Every group's stragglers, in the order of the groups (the memo's, where nothing they are judged
    from changed: the groups, who is in which, every trace's rows)."""
    membership = ctx.membership
    key = (tuple((id(t), t.rows_version) for t in ctx.traces.values()), lateness_ns, membership.groups,
           membership.group_of)  # (in the order a busy job's keys differ soonest)
    if memo is not None and memo.key == key:
        return memo.found
    groups = [(group, {r: c[0] for r, c in all_cols[k].items()}) for k, group in membership.groups.items()]
    inherited = inherited_waits(groups)  # lateness a rank inherits from a peer it waited for is not its own
    found = [s for group, cols in groups
             for s in find_stragglers(group, cols, lateness_ns, inherited=inherited.get(group.key))]
    if memo is not None:
        memo.key, memo.traces, memo.found = key, tuple(ctx.traces.values()), found
    return found


def late_not_hung(findings: list[Finding], stragglers: list[Finding]) -> list[Finding]:
    """A snapshot of a job with a straggler catches its peers waiting for it: a hang suspect whose
    culprits all reach collectives late every step is that lateness, seen once, not a second fault.
    One look cannot tell it from a hang that began now (two looks can); it is said under the straggler."""
    late = {f.culprit_ranks[0]: i for i, f in enumerate(stragglers)}
    out = []
    for f in findings:
        if (f.root_cause and not f.certain and f.kind in F.MISSING_KINDS and f.culprit_ranks
                and all(r in late for r in f.culprit_ranks)):
            for r in f.culprit_ranks:
                s = stragglers[late[r]]
                stragglers[late[r]] = replace(s, details=s.details + (
                    f"now: {f.message.split(': the suspect', 1)[0]}: its usual lateness, or a hang if it never "
                    f"arrives (one look cannot tell)",))
            continue
        out.append(f)
    return out + stragglers
