"""The earliest proven fault is the root cause; what follows it is its consequence.

A rank that passes an extra tensor to a coalesced all_reduce makes gloo fail the collective: a peer
may die of it, others fail out or wait. Each of those looks like a fault of its own (a missing
dump, a rank that never issued the next collective, a collective that never finished), but they
come after a fault the dumps prove by themselves (ranks disagree on what they ran). So the proven
disagreement is reported as the root cause, and the hangs, deaths and missing dumps at or after it
are listed under it as consequences: one fault, one finding, its culprit named first.

"After" is the same collective or a later one of the same group, or, across groups, a later issue
time. What is folded never includes another disagreement (a second proven fault stays a finding of
its own) nor stragglers (they are judged over many collectives, not at one moment).
"""

from __future__ import annotations

from dataclasses import replace

from frexport.analysis.findings import DESYNC_KINDS, MISSING_DUMP, STALL_KINDS, Finding


def _after(f: Finding, root: Finding) -> bool:
    if f.time_ns is None:
        return False  # no moment to place it by (a rank without any dump: see `fold`)
    if f.pg_name == root.pg_name and f.collective_seq_id is not None and root.collective_seq_id is not None:
        return f.collective_seq_id >= root.collective_seq_id
    return f.time_ns is not None and root.time_ns is not None and f.time_ns >= root.time_ns


def _caused(f: Finding, root: Finding) -> bool:
    """Whether a hang `f` can be the mismatch `root`'s doing. Ranks still blocked in the mismatched
    collective (`root.root_cause`): whatever hangs after it. A mismatch the ranks got past (gloo
    completes a bf16/fp16 one silently) can only have brought down the collective right after it in
    its group (a peer that died of it); a hang many collectives later has a cause of its own."""
    if not _after(f, root):
        return False
    if root.root_cause:
        return True
    return (f.pg_name == root.pg_name and f.collective_seq_id is not None and root.collective_seq_id is not None
            and f.collective_seq_id - root.collective_seq_id <= 1)


def fold(findings: list[Finding]) -> list[Finding]:
    proven = [f for f in findings if f.kind in DESYNC_KINDS and f.certain and f.culprit_ranks
              and f.time_ns is not None]
    if not proven:
        return findings
    root = min(proven, key=lambda f: (f.time_ns, f.culprit_ranks))
    later = [f for f in findings if f is not root and f.kind in STALL_KINDS and _caused(f, root)]
    if later or root.root_cause:
        # the fault was followed by a hang: a rank that left no dump at all is taken to be part of it
        # (nothing says it went before); after a mismatch that completed, it stays a finding of its own
        later += [f for f in findings if f.kind == MISSING_DUMP and f.time_ns is None]
    if not later:
        return findings
    blocked = set(root.blocked_ranks)
    for f in later:
        blocked |= set(f.culprit_ranks) | set(f.blocked_ranks)
    blocked -= set(root.culprit_ranks)
    folded = replace(root, root_cause=True, blocked_ranks=tuple(sorted(blocked)), consequences=tuple(later),
                     details=root.details + tuple(f"consequence: {f.message}" for f in later))
    gone = {id(f) for f in later}
    return [folded if f is root else f for f in findings if id(f) not in gone]
