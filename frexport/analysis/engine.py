"""The cross-rank analysis: from every rank's trace to a diagnosis.

Order of reasoning:
1. membership of every process group (from pg_config, or inferred for gloo);
2. per group, match collectives by collective_seq_id and find where ranks disagree
   (op, sizes, dtypes); the culprit of a disagreement is the odd one out by vote,
   never "whoever's file came first";
3. the wait-for graph of unfinished ops gives the root causes of a hang, each with
   every rank it blocks, transitively through other groups;
4. stragglers, timeouts and ranks without a dump.
The result does not depend on file names or their order: ranks are sorted and
every tie is broken by evidence or reported as ambiguous.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any, cast

from frexport.analysis import findings as F
from frexport.analysis.clock import RECORDER, duration
from frexport.analysis.consequence import fold
from frexport.analysis.cycle import out_of_order, role, role_text, site_roles
from frexport.analysis.departure import vanished
from frexport.analysis.exchange import imbalance
from frexport.analysis.findings import Diagnosis, Finding, format_ranks
from frexport.analysis.hang import (
    CYCLE,
    IDLE,
    INSIDE,
    LEFT,
    NO_DUMP,
    REMOTE,
    Root,
    Wait,
    cycle_path,
    find_waits,
    root_causes,
)
from frexport.analysis.lateness import late_not_hung, straggler_findings
from frexport.analysis.matching import Disagreement, SigIds, match_group, mismatch_kind
from frexport.analysis.membership import Group, Membership, build_membership
from frexport.analysis.pass_memo import PassMemo
from frexport.analysis.placement import behind
from frexport.analysis.signature_ids import signature_ids, start_analysis
from frexport.analysis.unseen import blocked_ranks, fold_blocked, unrecorded, unseen_waits
from frexport.model.call_site import Frame, Threads, site_text
from frexport.model.dump import InputError, split_group_name
from frexport.model.rank_trace import FINISHED, ISSUED, ISSUED_BYTE, STARTED, GroupTrace, RankTrace
from frexport.model.signature import Signature, canonical, describe, op_name


@dataclass(frozen=True)
class Options:
    stall_after_s: float = 5.0  # a rank seen this long after its peers issued an op, without it, never issued it
    # The dump times are when the ranks were seen (the sidecar's polls), so waits can be timed. A
    # post-mortem's file times are not (copies and checkouts reset them): they can show a snapshot
    # was fresh, never that ranks waited long.
    clock: bool = False
    straggler_lateness_s: float = 0.05
    max_findings: int = 100
    # the ranks this analysis may blame (a sidecar's own ranks); None: every rank the world size implies.
    # Ranks outside it are remote: never a culprit nor "missing their dump", their waiters are blocked.
    scope: frozenset[int] | None = None
    # ranks two sources claim at once, neither believed (the job view's peers: sources/peer_owners.py):
    # never judged, as if remote: a claim is no evidence against the rank
    contested: frozenset[int] = frozenset()


class _Context:
    """Shared lookups for one analysis run."""

    def __init__(self, traces: dict[int, RankTrace], membership: Membership,
                 stacks: dict[int, Threads] | None = None) -> None:
        self.traces = traces
        self.membership = membership
        self.stacks = stacks or {}
        # ranks that answered at the look that took the stacks beside the dumps (none: no stacks)
        self.alive = frozenset(self.stacks)
        self.seen_waiting: frozenset[int] = frozenset()  # ranks a live poll saw waiting past the threshold
        # ranks whose records end before ops their peers completed and went past (placement.py): stale
        # dumps or not the job's: their absence from a later op casts no vote on who is out of step
        self.behind: frozenset[int] = frozenset()
        # ranks whose recorder holds point-to-point ops (NCCL's does, gloo's never): elsewhere a rank that
        # waits for nobody the recorder shows may wait in a send or recv
        self.records_p2p = frozenset(r for r, t in traces.items() if any(map(_p2p, t.groups.values())))
        start_analysis()
        self.canon: dict[int, list[int]] = {}
        tables: dict[int, bytes | None] = {}
        for rank, t in traces.items():
            self.canon[rank], tables[rank] = signature_ids(t)
        # Where every index and id fits in a byte (a job runs a few dozen distinct ops), a rank's column
        # of indices becomes ids through a table, in C (bytes.translate), not entry by entry.
        self.id_tables: dict[int, bytes] | None = None
        if None not in tables.values():
            self.id_tables = cast("dict[int, bytes]", tables)

    def answered_but(self, ranks) -> bool:
        """The stacks are one look at every rank but `ranks`: a missing stack among those is a rank that
        did not answer. A look at only some ranks (an evidence bundle keeps the stuck ranks' stacks, a
        fetch that timed out) says nothing of the others, so nothing is concluded from it."""
        return bool(self.alive) and set(self.traces) - set(ranks) <= self.alive

    def group_cols(self, group: Group) -> dict[int, tuple[GroupTrace, SigIds]]:
        """Each member's columns of `group`, and its signatures as canonical ids."""
        cols: dict[int, tuple[GroupTrace, SigIds]] = {}
        for r in group.members:
            t = self.traces.get(r)
            g = t.groups.get(group.name) if t else None
            if g is not None and self.membership.group_of.get((r, group.name), group.name) == group.key:
                if self.id_tables is not None:
                    cols[r] = (g, _low_bytes(g.sig).translate(self.id_tables[r]))
                else:
                    cols[r] = (g, array("l", map(self.canon[r].__getitem__, g.sig)))
        return cols

    def entry(self, rank: int, group: Group, seq: int) -> tuple[Signature, Frame | None, int] | None:
        t = self.traces.get(rank)
        g = t.groups.get(group.name) if t else None
        i = g.position(seq) if g else None
        if i is None:
            return None
        assert t is not None and g is not None  # (for mypy) i is a position in t's group g
        return t.signatures[g.sig[i]], t.call_site(g.site[i]), g.created_ns[i]

    def last_site(self, rank: int) -> str | None:
        """Where a rank issued its newest recorded op (a hint to where it is now)."""
        t = self.traces.get(rank)
        best = None
        for g in (t.groups.values() if t else ()):
            if len(g.seq):
                i = max(range(len(g.seq)), key=lambda k: g.created_ns[k])
                if best is None or g.created_ns[i] > best[0]:
                    assert t is not None  # (for mypy) g is one of t's groups
                    best = (g.created_ns[i], t.call_site(g.site[i]), g)
        # None without a call site (JSON dumps carry no stacks): a group's name is not a place
        return site_text(best[1]) if best is not None else None

    def sites_of(self, rank: int) -> set[Frame]:
        t = self.traces.get(rank)
        return set(t.call_sites) if t else set()


def _low_bytes(column: array) -> bytes:
    """The low byte of each item of an integer column (all of them, where every value is 0..255)."""
    n = column.itemsize
    return column.tobytes()[0 if sys.byteorder == "little" else n - 1::n]


def analyze(traces: list[RankTrace], input_errors: list[InputError] | None = None,
            known_ranks: set[int] | None = None, options: Options = Options(),
            stacks: dict[int, Threads] | None = None,
            calls: dict[int, tuple[str, dict[str, str]]] | None = None,
            memo: PassMemo | None = None) -> Diagnosis:
    """`stacks`: each rank's Python threads, taken at one look beside the dumps; `calls`: the
    torch.distributed call each rank's stack is in, with its arguments where py-spy printed them
    (decode/stacks.py); `memo`: a live analysis's, kept from pass to pass (pass_memo.py)."""
    by_rank = {t.rank: t for t in sorted(traces, key=lambda t: t.rank)}
    # a rank whose file could not be read is still a rank of the job (its dump is missing)
    known = set(known_ranks or ()) | {e.rank for e in input_errors or () if e.rank is not None}
    stale = behind(by_rank)
    membership = memo.membership.build(by_rank, known, stale) if memo else build_membership(by_rank, known, stale)
    # dumps that cannot be placed in the job are input errors, never voters (placement.py)
    input_errors = list(input_errors or []) + [
        InputError(by_rank[r].source, "not placed in the job: its records end before ops the other ranks completed "
                   "and went past, and its rank lies beyond a gap after theirs", r) for r in membership.unplaced]
    ctx = _Context(by_rank, membership, stacks)
    ctx.behind = frozenset(stale)
    stall_after_ns = int(options.stall_after_s * 1e9)

    matched = 0
    mismatch_findings: dict[tuple[str, int], Finding] = {}  # (group key, seq) -> finding
    all_cols: dict[str, dict[int, tuple[GroupTrace, SigIds]]] = {}
    for key, group in membership.groups.items():
        cols = all_cols[key] = ctx.group_cols(group)
        result = match_group(cols)
        matched += result.matched
        for f, seqs in _mismatch_findings(ctx, group, cols, result.disagreements):
            for s in seqs:
                mismatch_findings[(key, s)] = f

    scope = options.scope
    if options.contested:
        scope = (scope if scope is not None else frozenset(range(membership.world_size))) - options.contested
    waits = find_waits(by_rank, membership, stall_after_ns, options.clock, scope)
    roots = root_causes(waits, by_rank, stall_after_ns, scope, options.clock)
    if options.clock:
        ctx.seen_waiting = frozenset(w.rank for w in waits if w.proven and not w.timed_out)
    root_findings, used_mismatches = _root_findings(ctx, roots, mismatch_findings, waits, options.contested)
    findings = sorted(root_findings, key=lambda f: (f.time_ns or 0, f.culprit_ranks))
    # a proven hang's culprit is not also called a straggler; a suspect may be one (see below)
    hang_culprits = {r for f in root_findings if f.certain for r in f.culprit_ranks}

    seen_mismatch = set()
    for f in mismatch_findings.values():
        if id(f) not in used_mismatches and id(f) not in seen_mismatch:
            seen_mismatch.add(id(f))
            findings.append(f)
    findings.extend(_timeout_findings(waits, root_findings))
    findings = late_not_hung(findings, straggler_findings(ctx, all_cols, hang_culprits, options,
                                                     memo.stragglers if memo else None))
    findings.extend(_missing_dump_findings(ctx, root_findings, input_errors or [], scope))

    notes = list(membership.notes)
    for t in by_rank.values():
        notes.extend(f"rank {t.rank}: {n}" for n in t.notes)
    versions = Counter(t.version_text for t in by_rank.values())
    if len(versions) > 1:
        notes.append("ranks wrote different dump format versions: " +
                     ", ".join(f"{v or 'unversioned'} ({n} ranks)" for v, n in sorted(versions.items(), key=str)))
    if stacks:  # ranks the stacks show waiting in calls the recorder does not show (gloo's send/recv)
        issue_only = {r for r, t in by_rank.items() if _issue_only(t)}
        inside = blocked_ranks(stacks, calls or {})
        # a root cause whose ranks wait in such a call is blocked behind another one
        findings = fold_blocked(findings, unrecorded(inside, ctx.records_p2p, issue_only))
        # (a mismatch explains a rank's wait too: on a backend that reports no completion, the collective
        # it cannot complete is not a root here, every member having issued it)
        explained = {r for f in findings if f.root_cause for r in f.culprit_ranks + f.blocked_ranks}
        explained.update(r for f in findings if f.kind in F.MISMATCH_KINDS for g in membership.groups.values()
                         if g.name == f.pg_name for r in g.members)
        findings = unseen_waits(inside, ctx.records_p2p, explained, issue_only) + findings
    findings = fold(findings)  # the earliest proven fault is the root cause, what follows its consequence
    if len(findings) > options.max_findings:
        notes.append(f"{len(findings) - options.max_findings} more findings not shown")
        findings = findings[: options.max_findings]
    return Diagnosis(ranks=sorted(by_rank), findings=findings, input_errors=list(input_errors or []),
                     notes=notes, matched=matched, waits=waits,
                     # groups someone recorded ops in: gloo's pg_config adds an unnamed placeholder entry
                     groups=sum(1 for cols in all_cols.values() if cols))


_p2p = attrgetter("p2p")
_PENDING_NOT_ISSUED = bytes(1 if not v & FINISHED and not v & ISSUED else 0 for v in range(256))


def _issue_only(t: RankTrace) -> bool:
    """The rank's recorder shows ops known only to be issued (a hooked backend that reports no
    completion), and nothing else unfinished: whether it waits in a collective, only its stack says."""
    cols = [g.flags.tobytes() for g in t.groups.values()]
    return any(1 in c.translate(ISSUED_BYTE) for c in cols) and \
        not any(1 in c.translate(_PENDING_NOT_ISSUED) for c in cols)


def _mismatch_findings(ctx: _Context, group: Group, cols, disagreements: list[Disagreement]):
    """One finding per run of disagreements with the same culprits, kind and normal op."""
    out: list[tuple[Finding, list[int]]] = []
    current: list[Any] | None = None  # [key, finding, seqs] of the run being gathered
    for d in disagreements:
        counts = Counter(d.votes.values())
        ranked = counts.most_common()
        normal = ranked[0][0]
        ambiguous = len(ranked) > 1 and ranked[1][1] == ranked[0][1]
        if ambiguous:  # a tie: the op this group ran more often before is the normal one
            tied = [c for c, n in ranked if n == ranked[0][1]]
            history = {c: sum(col.count(c) for _, col in cols.values()) for c in tied}
            best = max(history.values())
            if list(history.values()).count(best) == 1:
                normal, ambiguous = max(history, key=history.__getitem__), False
        culprits = tuple(sorted(d.votes)) if ambiguous else tuple(sorted(r for r, c in d.votes.items() if c != normal))
        agreeing = tuple(sorted(r for r, c in d.votes.items() if c == normal)) if not ambiguous else ()
        normal_rank = agreeing[0] if agreeing else culprits[0]
        normal_sig, _, created = _voted_entry(ctx, normal_rank, group, d.seq)
        culprit_sig, culprit_site, _ = _voted_entry(ctx, culprits[0], group, d.seq)
        kind = mismatch_kind(normal_sig, culprit_sig) if not ambiguous else _ambiguous_kind(ctx, group, d)
        key = (kind, culprits, canonical(normal_sig))
        if current is not None and current[0] == key and d.seq == current[2][-1] + 1:
            current[2].append(d.seq)
            continue
        if current is not None:
            out.append((_finish_mismatch(current), current[2]))
        details = []
        by_sig: dict[int, list[int]] = {}
        for r, c in d.votes.items():
            by_sig.setdefault(c, []).append(r)
        for _, ranks in sorted(by_sig.items(), key=lambda kv: (-len(kv[1]), kv[1])):
            sig, site, _ = _voted_entry(ctx, ranks[0], group, d.seq)
            details.append(f"ranks {format_ranks(ranks)}: {describe(sig)}" + (f" at {site_text(site)}" if site else ""))
        if ambiguous:
            message = (f"ranks {format_ranks(d.votes)} disagree on collective {d.seq} of group {group.label} "
                       f"and no side is a majority")
        else:
            message = (f"rank{'s' if len(culprits) > 1 else ''} {format_ranks(culprits)} "
                       f"{_mismatch_verb(kind)} at collective {d.seq} of group {group.label}: "
                       f"{describe(culprit_sig)} where ranks {format_ranks(agreeing)} ran {describe(normal_sig)}")
        reason = ("no side is a majority and the group's history does not say which op is normal" if ambiguous
                  else f"at the same collective_seq_id {_ranks(agreeing)} recorded one op and "
                       f"{_ranks(culprits)} another: the odd one out by vote, whatever the file order")
        finding = Finding(kind, group.name, group.desc, d.seq, culprits, (), op_name(culprit_sig),
                          site_text(culprit_site), message, tuple(details), time_ns=created, reason=reason)
        current = [key, finding, [d.seq]]
    if current is not None:
        out.append((_finish_mismatch(current), current[2]))
    return out


def _voted_entry(ctx: _Context, rank: int, group: Group, seq: int) -> tuple[Signature, Frame | None, int]:
    """`ctx.entry` of a rank that voted at `seq` (matching.py): its column holds that op, so it is there."""
    e = ctx.entry(rank, group, seq)
    assert e is not None  # (for mypy) a vote is an op the rank's column holds at seq
    return e


def _finish_mismatch(current) -> Finding:
    _, f, seqs = current
    if len(seqs) == 1:
        return f
    return replace(f, message=f"{f.message} (and the {len(seqs) - 1} collectives after it)")


def _ambiguous_kind(ctx: _Context, group: Group, d: Disagreement) -> str:
    sigs = [_voted_entry(ctx, r, group, d.seq)[0] for r in sorted(d.votes)]
    kinds = {mismatch_kind(sigs[0], s) for s in sigs[1:] if canonical(s) != canonical(sigs[0])}
    for k in F.MISMATCH_KINDS:
        if k in kinds:
            return k
    return F.DESYNC


def _mismatch_verb(kind: str) -> str:
    return {F.DESYNC: "ran a different collective", F.SIZE_MISMATCH: "passed different tensor sizes",
            F.DTYPE_MISMATCH: "passed different dtypes"}[kind]


def _root_findings(ctx: _Context, roots: list[Root], mismatches: dict[tuple[str, int], Finding],
                   waits: list[Wait], contested: frozenset[int] = frozenset()):
    findings: list[Finding] = []
    used: set[int] = set()
    merged: dict[tuple, list[Root]] = {}
    for root in roots:
        w = root.wait
        merged.setdefault((root.kind, w.group.key, w.seq, w.p2p), []).append(root)
    idle = [rs for key, rs in merged.items() if key[0] == IDLE]
    if _indistinct(ctx, idle):
        findings.append(_indistinct_root(ctx, idle, waits))
        merged = {key: rs for key, rs in merged.items() if key[0] != IDLE}
    for (kind, gkey, seq, p2p), rs in merged.items():
        w = min((r.wait for r in rs), key=lambda w: (w.created_ns, w.rank))
        first = len(findings)
        ranks = tuple(sorted({r for root in rs for r in root.ranks}))
        blocked = {r for root in rs for r in root.blocked} - set(ranks)
        certain = any(r.certain for r in rs)
        if kind in (INSIDE, LEFT):
            mismatch = mismatches.get((gkey, seq))
            if mismatch is not None:
                used.add(id(mismatch))
                culprits = mismatch.culprit_ranks
                blocked |= set(w.joined) | set(ranks)
                findings.append(_as_root(mismatch, tuple(sorted(blocked - set(culprits))), w))
            elif kind == LEFT:
                findings.append(_left_root(ctx, w, ranks, blocked, certain))
            else:
                findings.append(_stuck_inside(ctx, w, ranks, blocked, certain))
        elif kind == NO_DUMP:
            findings.append(_no_dump_root(ctx, w, ranks, blocked, p2p))
        elif kind == REMOTE:
            findings.append(_remote_wait(w, ranks, blocked, p2p, contested))
        elif kind == CYCLE:
            findings.extend(_cycle_root(ctx, r, waits) for r in rs)
        else:
            waited_by = {r for root in rs for r in root.waited_by}
            findings.append(_idle_root(ctx, w, ranks, blocked, waited_by, p2p, certain,
                                       {m for root in rs for m in root.wait.left}))
        findings[first:] = [_timed(f, w) for f in findings[first:]]
    return findings, used


def _indistinct(ctx: _Context, idle: list[list[Root]]) -> bool:
    """Ranks of several collectives wait for nobody the recorder shows while peers wait for them, none of
    them records point-to-point ops and no stack says where they are: any of them may wait for another in
    a send or recv the recorder does not show (gloo records none), so the dumps cannot tell the culprit
    from the ranks blocked behind it."""
    ranks = {r for rs in idle for root in rs for r in root.ranks}
    return (len(idle) > 1 and not ranks & (set(ctx.stacks) | ctx.records_p2p)
            and not any(root.wait.left or root.wait.p2p for rs in idle for root in rs))


def _indistinct_root(ctx: _Context, idle: list[list[Root]], waits: list[Wait]) -> Finding:
    """One finding for the candidates the data cannot tell apart, saying where each one is and where its
    peers wait for it, instead of as many equal root causes."""
    roots = sorted((root for rs in idle for root in rs), key=lambda r: (r.wait.created_ns, r.ranks))
    cands = tuple(sorted({r for root in roots for r in root.ranks}))
    blocked = tuple(sorted({r for root in roots for r in root.blocked} - set(cands)))
    certain = all(root.certain for root in roots)
    details = [_awaited(ctx, r, waits) for root in roots for r in root.ranks]
    w = roots[0].wait
    reason = ("each of them has peers waiting for it in a collective it has not issued and waits in no op its "
              "recorder shows: a rank stuck in its own code and one waiting in a send or recv (gloo records no "
              "point-to-point op) leave the same records; their stacks would tell (py-spy dump --locals names "
              "each send's and recv's peer)")
    if not certain:
        reason += "; and whether it is a hang at all, their file times do not say"
    return Finding(
        F.MISSING_RANK, w.group.name, w.group.desc, w.seq, cands, blocked, op_name(w.sig), site_text(w.site),
        f"{_ranks(cands)} cannot be told apart by these dumps: each has peers waiting for it in a collective it "
        f"has not issued, and one of them may be stuck while the others wait for it in a send or recv the "
        f"recorder does not show; {len(blocked)} rank{'s' if len(blocked) != 1 else ''} ({format_ranks(blocked)}) "
        f"{'are' if len(blocked) != 1 else 'is'} blocked", tuple(details), True, w.created_ns, reason, certain)


def _awaited(ctx: _Context, rank: int, waits: list[Wait]) -> str:
    """'rank 9 has not issued all_reduce (collective 4 of group 3 (tp)) that ranks 8, 10, 11 wait in, ...;
    it last recorded an op at train.py:40': where its peers wait for it, and where it was last seen."""
    by_op: dict[tuple[str, int], list[Wait]] = {}
    for w in waits:
        if rank in w.edges and not w.p2p:
            by_op.setdefault((w.group.key, w.seq), []).append(w)
    ops = []
    for ws in sorted(by_op.values(), key=lambda ws: min(w.created_ns for w in ws)):
        waiting = {w.rank for w in ws}
        ops.append(f"{op_name(ws[0].sig)} (collective {ws[0].seq} of group {ws[0].group.label}) that "
                   f"{_ranks(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in")
    last = ctx.last_site(rank)
    return f"rank {rank} has not issued {', nor '.join(ops)}" + (f"; it last recorded an op at {last}" if last else "")


def _no_dump_root(ctx: _Context, w: Wait, ranks: tuple[int, ...], blocked: set[int], p2p: bool) -> Finding:
    """Ranks without any dump that others wait for: the likely culprits, and proven ones where members
    failed out of the collective for want of them (they left the job: missing_rank, whatever the dumps)."""
    failed = set(w.left) - set(ranks)
    blocked = blocked | failed  # members that failed out of it: victims, like the waiters
    kind = F.MISSING_RANK if failed else F.MISSING_DUMP
    if failed:
        message, reason = _departure(ctx, w, ranks, failed, blocked, _gone(ctx, ranks), dumped=False)
    else:
        message = (f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)} left no dump, and ranks "
                   f"{format_ranks(w.joined or [w.rank])} wait for {'them' if len(ranks) > 1 else 'it'} in "
                   f"{op_name(w.sig)} (collective {w.seq} of group {w.group.label}): the likely culprit, but the "
                   f"dump that would show why is missing")
        reason = f"{_ranks(w.joined or [w.rank])} wait for {_ranks(ranks)}, whose dump is missing"
    return Finding(kind, w.group.name, w.group.desc, None if p2p else w.seq, ranks, tuple(sorted(blocked)),
                   op_name(w.sig), site_text(w.site), message, _waiting_details(w, failed), True, w.created_ns, reason)


def _gone(ctx: _Context, ranks: tuple[int, ...]) -> bool:
    """The stacks of one look hold every other rank and not these: they did not answer, they left the job."""
    return not set(ranks) & ctx.alive and ctx.answered_but(ranks)


def _departure(ctx: _Context, w: Wait, ranks: tuple[int, ...], failed: set[int] | frozenset[int], blocked: set[int],
               gone: bool, dumped: bool = True) -> tuple[str, str]:
    """(message, reason) where members finished a collective `ranks` never issued: they failed out of it for
    want of them (victims). Where others still wait in it, the connections to the absent ranks closed on
    the members talking to them: those ranks left the job, however they went (died, crashed, or exited
    cleanly when their data ran out: uneven inputs), and whatever their dumps show of it."""
    still = sorted((set(w.joined) | {w.rank}) - set(failed) - set(ranks))
    behind = sorted(blocked - set(failed) - set(still) - set(ranks))
    left = gone or (bool(still) and not set(ranks) & ctx.alive)
    if left:
        after = f"after collective {w.seq - 1}" if w.seq > 1 else f"before collective {w.seq}"
        message = (f"{_ranks(ranks)} left the job {after} of group {w.group.label}; {_ranks(failed)} failed out "
                   f"of collective {w.seq} ({op_name(w.sig)})")
    else:
        message = (f"{_ranks(ranks)} never issued {op_name(w.sig)} (collective {w.seq} of group {w.group.label}): "
                   f"{_ranks(failed)} failed out of it")
    if still:
        message += f", {_ranks(still)} {'waits' if len(still) == 1 else 'wait'} in it"
    if behind:
        message += f"; {_ranks(behind)} {'is' if len(behind) == 1 else 'are'} blocked behind " \
                   f"{'it' if len(ranks) == 1 else 'them'}"
    reason = (f"{_ranks(failed)} finished collective {w.seq} without {_ranks(ranks)}"
              + (f" while {_ranks(still)} still {'waits' if len(still) == 1 else 'wait'} in it" if still else "")
              + ": a collective ends on some members only when it fails, so they failed out of it (victims)")
    if left:
        reason += ("; it fails on the members talking to a rank that is gone (gloo: 'Connection closed by peer'), "
                   "however that rank went: a crash, a kill, or a clean exit when its data ran out before its "
                   "peers' (uneven inputs: torch.distributed.algorithms.Join lets such a rank shadow the "
                   "collectives it no longer issues)")
    if gone:
        reason += f"; {_ranks(ranks)} did not answer at the look that took the others' stacks"
    last = _last_seq(ctx, ranks, w.group)
    if not dumped:
        reason += f"; {'it' if len(ranks) == 1 else 'they'} left no dump"
    elif all(not ctx.traces[r].groups for r in ranks):
        reason += (f"; {_ranks(ranks)}'s dump holds no entry (one taken as the process exits: torch empties the "
                   "recorder then)")
    elif last is not None and last < w.seq - 1:
        reason += f"; {_ranks(ranks)}'s records end at collective {last}: a dump taken before it left"
    return message, reason


def _last_seq(ctx: _Context, ranks: tuple[int, ...], group: Group) -> int | None:
    """The newest collective of `group` the records of `ranks` hold (None: none)."""
    seqs = [g.seq[-1] for r in ranks if (t := ctx.traces.get(r)) is not None
            and (g := t.groups.get(group.name)) is not None and len(g.seq)]
    return max(seqs) if seqs else None


def _timed(f: Finding, w: Wait) -> Finding:
    """The finding with how long its oldest waiting rank waited, and against which clock (clock.py)."""
    if w.waited is None:
        return f
    return replace(f, waited=w.waited, details=f.details + (f"rank {w.rank} waited {w.waited.text()}",))


def _remote_wait(w: Wait, remote: tuple[int, ...], blocked: set[int], p2p: bool,
                 contested: frozenset[int] = frozenset()) -> Finding:
    """Ranks in scope wait for ranks outside it: they are blocked; who is at fault is decided where
    the remote ranks are watched (their own pod's sidecar, the job-wide rules, the job-level view), or
    nowhere for a rank two peers claim (Options.contested)."""
    waiting = sorted(blocked)
    where = f"{op_name(w.sig)} ({'p2p' if p2p else 'collective'} {w.seq} of group {w.group.label})"
    if set(remote) <= contested:
        return Finding(
            F.REMOTE_WAIT, w.group.name, w.group.desc, None if p2p else w.seq, (), tuple(waiting), op_name(w.sig),
            site_text(w.site),
            f"rank{'s' if len(waiting) > 1 else ''} {format_ranks(waiting)} {'are' if len(waiting) > 1 else 'is'} "
            f"blocked: {where} waits for {_ranks(remote)}, which two peers claim at once: neither claim is used, "
            "so who is at fault is not judged", _waiting_details(w), False, w.created_ns,
            f"{_ranks(waiting)} wait for {_ranks(remote)}; a rank claimed twice is never blamed on the claim")
    return Finding(
        F.REMOTE_WAIT, w.group.name, w.group.desc, None if p2p else w.seq, (), tuple(waiting), op_name(w.sig),
        site_text(w.site),
        f"rank{'s' if len(waiting) > 1 else ''} {format_ranks(waiting)} {'are' if len(waiting) > 1 else 'is'} "
        f"blocked: {where} waits for rank{'s' if len(remote) > 1 else ''} {format_ranks(remote)} of other pods"
        + (f", for {w.waited.text()}" if w.waited else ""), _waiting_details(w), False, w.created_ns,
        f"{_ranks(waiting)} wait for {_ranks(remote)}, watched by other pods")


def _ranks(ranks) -> str:
    ranks = sorted(set(ranks))
    if len(ranks) == 2:
        return f"ranks {ranks[0]} and {ranks[1]}"
    return f"rank{'s' if len(ranks) != 1 else ''} {format_ranks(ranks)}"


def _cycle_root(ctx: _Context, root: Root, waits: list[Wait]) -> Finding:
    """A deadlock: the culprit is the rank whose order of collectives differs from everyone else's."""
    cycle = root.ranks
    edges_of: dict[int, set[int]] = {}
    for x in waits:
        if x.rank in cycle:
            edges_of.setdefault(x.rank, set()).update(set(x.edges) & set(cycle))
    culprits = out_of_order(cycle, waits) or cycle
    w = root.wait
    own = [x for x in waits if x.rank == culprits[0] and x.edges and not x.p2p]
    if own:
        w = min(own, key=lambda x: (x.created_ns, x.seq))
    loop = " -> ".join(map(str, cycle_path(edges_of, culprits[0])))
    blocked = tuple(sorted((set(root.blocked) | set(cycle)) - set(culprits)))
    others = sorted({x.rank for x in waits if x.edges and not x.p2p and role(x) != role(w)} - set(culprits))
    if w.site is not None and len(culprits) < len(cycle):
        by_role = site_roles(ctx.traces, w.site, set(culprits))
        usual = max((r for r in by_role if r != role(w)), key=lambda r: len(by_role[r]), default=None)
        if usual is not None:
            reason = (f"{_ranks(culprits)} issued {w.site.filename.rsplit('/', 1)[-1]}:{w.site.line} on "
                      f"{role_text(role(w))} where {_ranks(by_role[usual])} issue it on {role_text(usual)}")
        else:
            reason = f"{_ranks(culprits)} wait in {role_text(role(w))} where {_ranks(others)} wait elsewhere"
    elif len(culprits) < len(cycle):
        reason = (f"{_ranks(culprits)} wait{'s' if len(culprits) == 1 else ''} in {role_text(role(w))} where "
                  f"{_ranks(others)} wait in another group")
    else:
        reason = "no rank's order stands out: every rank of the cycle waits in a group the others wait in too"
    reason += f"; the wait-for graph is a cycle {loop}"
    if len(culprits) < len(cycle):
        message = (f"{_ranks(culprits)} issued {op_name(w.sig)} (collective {w.seq} of group {w.group.label}) "
                   f"before the collective {'its' if len(culprits) == 1 else 'their'} peers wait in: collectives "
                   f"issued in a different order across process groups, a deadlock; {_ranks(blocked)} "
                   f"{'are' if len(blocked) != 1 else 'is'} blocked")
    else:
        message = (f"ranks {format_ranks(cycle)} wait for each other across process groups: they issued "
                   f"collectives in different orders (a deadlock)")
    return Finding(F.DESYNC, w.group.name, w.group.desc, w.seq, tuple(culprits), blocked, op_name(w.sig),
                   site_text(w.site), message, _waiting_details(w), True, w.created_ns, reason, True)


def _signatures(ctx: _Context, w: Wait) -> dict[int, Signature]:
    out = {}
    for m in w.group.members:
        e = ctx.entry(m, w.group, w.seq)
        if e is None:
            return {}
        out[m] = e[0]
    return out


def _left_root(ctx: _Context, w: Wait, ranks: tuple[int, ...], blocked: set[int], certain: bool) -> Finding:
    """Members finished a collective their peers still wait in: they failed out of it."""
    waiting = tuple(sorted((set(w.joined) - set(ranks)) | blocked))
    where = f"{op_name(w.sig)} (collective {w.seq} of group {w.group.label})"
    bad = imbalance(_signatures(ctx, w))
    details = list(_waiting_details(w))
    site = ctx.entry(ranks[0], w.group, w.seq)
    reason = (f"{_ranks(ranks)} finished collective {w.seq} while {_ranks(set(w.joined) - set(ranks))} "
              f"{'have' if len(set(w.joined) - set(ranks)) > 1 else 'has'} not: a collective cannot finish on "
              f"some members and not on others unless they failed out of it")
    if bad is not None:
        details.extend(bad.details())
        return Finding(
            F.SIZE_MISMATCH, w.group.name, w.group.desc, w.seq, ranks, waiting, op_name(w.sig),
            site_text(site[1] if site else w.site),
            f"{_ranks(ranks)} left {where} that {_ranks(waiting)} still wait in: {bad.text()}",
            tuple(details), True, w.created_ns, reason + f"; {bad.text()}", True)
    still = set(w.joined) - set(ranks)
    if still and still <= ctx.alive | ctx.seen_waiting:
        # every member still in it was seen alive (its stack, or a live poll long after): none vanished,
        # so the members that left are where it went wrong
        if not certain:
            reason += (", or were dumped later than their peers (the dumps do not say how long the others "
                       "had waited)")
        return Finding(
            F.NOT_COMPLETED, w.group.name, w.group.desc, w.seq, ranks, waiting, op_name(w.sig),
            site_text(site[1] if site else w.site),
            f"{_ranks(ranks)} left {where} that {_ranks(waiting)} still wait in", tuple(details), True,
            w.created_ns, reason, certain)
    return _vanished_root(ctx, w, ranks, blocked, certain, where, reason)


def _vanished_root(ctx: _Context, w: Wait, failed: tuple[int, ...], blocked: set[int], certain: bool,
                   where: str, reason: str) -> Finding:
    """Members failed out of a collective and nothing they passed explains it: a member vanished from
    it (departure.py). The members that failed out are its victims; the one that left is named."""
    still = sorted(set(w.joined) - set(failed))
    look = ctx.alive if ctx.answered_but(still) else frozenset()
    gone, why = vanished(w.group, failed, still, look)
    # proven: a clock shows the others waited past the threshold, or the stacks of one look at every rank
    # show the one candidate left (it did not answer) while the members that failed out did
    by_stack = bool(look) and len(gone) == 1 and gone[0] not in look
    proven = len(gone) == 1 and (certain or by_stack)
    waiting = tuple(sorted((set(still) - set(gone)) | (blocked - set(failed) - set(gone))))
    victims = f"{_ranks(failed)} failed out of it (victims: a collective ends on some members only when it fails)"
    if len(gone) == 1:
        head = f"{_ranks(gone)} left the job inside {where}: {victims}"
    else:
        head = f"one of {_ranks(gone).replace(',', ' or')} left the job inside {where}: {victims}"
    if waiting:
        head += f"; {_ranks(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in it"
    if why:
        reason += "; " + "; ".join(why)
    if len(gone) > 1:
        reason += f"; which of {_ranks(gone)} left, the dumps do not say"
    if not certain and not by_stack:
        reason += ("; unless the dumps caught the collective completing (members dumped a moment apart): "
                   "nothing in them says how long the others had waited")
    details = [*_waiting_details(w, set(failed)), f"{_ranks(failed)} finished it and recorded nothing after"]
    return Finding(
        F.MISSING_RANK, w.group.name, w.group.desc, w.seq, gone, tuple(sorted((set(w.joined) | blocked) - set(gone))),
        op_name(w.sig), site_text(w.site), head, tuple(details), True, w.created_ns, reason, proven)


def _as_root(f: Finding, blocked: tuple[int, ...], w: Wait) -> Finding:
    message = f.message
    if blocked:
        message += (f"; it never finished: rank{'s' if len(blocked) > 1 else ''} {format_ranks(blocked)} "
                    f"{'have' if len(blocked) > 1 else 'has'} been blocked in it"
                    + (f" for {w.waited.text()}" if w.waited and _long(w) else ""))
    return replace(f, blocked_ranks=blocked, message=message, root_cause=True)


def _long(w: Wait, stall_after_ns: int = 0) -> bool:
    """The wait is timed by a clock that proves it long: the watchdog, a live poll (`proven`), or the
    recorder past `stall_after_ns` (0: the recorder's bound is shown only where a clock proved it)."""
    if w.proven:
        return True
    return bool(stall_after_ns and w.waited and w.waited.clock == RECORDER and w.waited.ns >= stall_after_ns)


def _waited(w: Wait) -> str:
    """A wait's duration and the clock it was measured against (clock.py)."""
    return w.waited.text() if w.waited else "an unknown time"


def _not_launched(ctx: _Context, w: Wait, members: set[int]) -> tuple[int, ...]:
    """On a backend that records starts (NCCL), members whose entry is still `scheduled` while their
    peers' are `started`: their device never launched the collective (still busy with earlier work)."""
    started: list[int] = []
    scheduled: list[int] = []
    for m in sorted(members):
        t = ctx.traces.get(m)
        g = t.groups.get(w.group.name) if t else None
        i = g.position(w.seq) if g else None
        if i is None:
            return ()  # (gloo never marks an entry started: there `started` stays empty)
        assert g is not None  # (for mypy) i is a position in g
        (started if g.flags[i] & STARTED else scheduled).append(m)
    return tuple(scheduled) if started and scheduled else ()


def _stuck_inside(ctx: _Context, w: Wait, ranks, blocked, certain: bool = True) -> Finding:
    members = set(w.joined) | set(ranks)
    where = f"{op_name(w.sig)} (collective {w.seq} of group {w.group.label})"
    bad = None if w.p2p else imbalance(_signatures(ctx, w))
    if bad is not None:  # sizes that cannot add up: no clock needed, but nothing says who is wrong
        return Finding(
            F.SIZE_MISMATCH, w.group.name, w.group.desc, w.seq, (), tuple(sorted(members | blocked)),
            op_name(w.sig), site_text(w.site), f"{where} cannot complete: {bad.text()}",
            _waiting_details(w) + bad.details(), True, w.created_ns,
            "every member issued it, but what they send does not add up to what they receive; which member's "
            "split sizes are wrong the dumps do not say", True)
    late = _not_launched(ctx, w, members)
    if late:
        launched = tuple(sorted(members - set(late)))
        return Finding(
            F.NOT_COMPLETED, w.group.name, w.group.desc, w.seq, late, tuple(sorted((members | blocked) - set(late))),
            op_name(w.sig), site_text(w.site),
            f"{_ranks(late)} never launched {where}: {'its' if len(late) == 1 else 'their'} entry is still "
            f"scheduled while {_ranks(launched)} started it and wait", _waiting_details(w), True, w.created_ns,
            f"the recorder marks {_ranks(late)} scheduled and {_ranks(launched)} started: the device of "
            f"{'that rank' if len(late) == 1 else 'those ranks'} is still busy with earlier work"
            + ("" if certain else "; whether for long the dumps do not say"), certain)
    kind = F.TIMEOUT if w.timed_out else F.NOT_COMPLETED
    if w.timed_out:
        what, reason = "timed out", "the recorder marks it retired without completing: the watchdog gave up"
    elif certain and not w.proven and w.waited and w.waited.clock == RECORDER:
        what = f"has not finished after {_waited(w)}"
        reason = (f"every member issued it, and it was still unfinished when rank {w.waited.rank} recorded an "
                  f"event {duration(w.waited.ns)} after the last of them did (the recorder's own clock)")
    elif certain:
        what = f"has not finished after {_waited(w)}"
        reason = f"every member issued it and the ranks were seen waiting in it {_waited(w)}"
    else:
        what = "has not finished in these dumps"
        reason = ("every member issued it and none finished it; a hang if it stays so, a collective in flight "
                  "if the dumps were taken moments after it started: their file times do not say which")
    return Finding(
        kind, w.group.name, w.group.desc, None if w.p2p else w.seq, (), tuple(sorted(members | blocked)),
        op_name(w.sig), site_text(w.site),
        f"{where} {what} although every member ({format_ranks(members)}) issued it with matching sizes and "
        f"dtypes: look below PyTorch (network, device, communicator)", _waiting_details(w), True, w.created_ns,
        reason, certain or w.timed_out)


def _idle_root(ctx: _Context, w: Wait, ranks: tuple[int, ...], blocked: set[int], waited_by: set[int],
               p2p: bool, certain: bool = True, failed: set[int] | frozenset[int] = frozenset()) -> Finding:
    joined = tuple(sorted(set(w.joined) | {w.rank}))
    where = f"{op_name(w.sig)} ({'p2p' if p2p else 'collective'} {w.seq} of group {w.group.label})"
    # Odd one out: when most ranks never issued the op, the few that did are the ones out of step,
    # unless ranks elsewhere also wait for the idle ones. A tie goes to the side whose call site the
    # other side never ran. Without a clock only that call site tells: the first ranks to reach a
    # collective in a healthy job are a minority too.
    peers_sites = set().union(*(ctx.sites_of(r) for r in ranks))
    unknown_site = bool(w.site is not None and peers_sites and w.site not in peers_sites)
    alone = waited_by <= set(joined)
    absent = [r for r in ranks if r not in ctx.behind]  # those whose absence votes (see _Context.behind)
    gone = _gone(ctx, ranks)
    extra = not p2p and alone and not failed and not gone and (
        (certain and len(absent) > len(joined)) or ((len(absent) == len(joined) or not certain) and unknown_site))
    details = list(_waiting_details(w, failed))  # ranks that failed out do not wait
    for r in ranks:
        last = ctx.last_site(r)
        if last:
            details.append(f"rank {r} last recorded an op at {last}")
    if extra:
        return Finding(
            F.DESYNC, w.group.name, w.group.desc, w.seq, joined, tuple(sorted(blocked - set(joined) - set(ranks))),
            op_name(w.sig), site_text(w.site),
            f"rank{'s' if len(joined) > 1 else ''} {format_ranks(joined)} issued {where} that ranks "
            f"{format_ranks(ranks)} never issued: an extra collective on "
            f"{'those ranks' if len(joined) > 1 else 'that rank'}, which now waits in it", tuple(details), True,
            w.created_ns,
            (f"{_ranks(joined)} issued it at {site_text(w.site)}, a call site {_ranks(ranks)} never ran"
             if unknown_site else f"{_ranks(ranks)} were seen long after without issuing it"), certain)
    kind = F.UNMATCHED_P2P if p2p else F.MISSING_RANK
    if failed:  # peers finished a collective these ranks never issued: they failed out of it
        message, reason = _departure(ctx, w, ranks, failed, blocked, gone)
        blocked = blocked | failed
    elif certain:
        verb = "never posted the matching " + ("recv" if w.sig and w.sig[0].op == "send" else "send") if p2p \
            else "never issued"
        message = (f"{_ranks(ranks)} {verb} {where}; {len(blocked)} rank{'s' if len(blocked) != 1 else ''} "
                   f"({format_ranks(blocked)}) {'are' if len(blocked) != 1 else 'is'} blocked, the oldest for "
                   f"{_waited(w)}")
        reason = (f"{_ranks(ranks)} {'was' if len(ranks) == 1 else 'were'} seen long after {_ranks(joined)} "
                  f"issued it, without issuing it" if not w.timed_out
                  else f"{_ranks(joined)} timed out waiting for {_ranks(ranks)}")
        went_on = _went_on(ctx, w, ranks)
        if went_on and not w.proven:
            reason = (f"{went_on} after {_ranks(joined)} issued it, without issuing it: "
                      f"{'its' if len(ranks) == 1 else 'their'} own recorder's clock, whatever the file times")
    elif gone:
        message = (f"{_ranks(ranks)} left the job before {where} that {_ranks(blocked or joined)} "
                   f"{'wait' if len(blocked or joined) != 1 else 'waits'} in")
        reason = (f"{_ranks(ranks)}'s records end before it, and {'it' if len(ranks) == 1 else 'they'} did not "
                  f"answer at the look that took the stacks of {_ranks(joined)}")
    else:
        have = "has" if len(ranks) == 1 else "have"
        verb = f"{have} not posted the matching " + ("recv" if w.sig and w.sig[0].op == "send" else "send") if p2p \
            else f"{have} not issued"
        did = ("issued" if w.issued else "wait in" if len(joined) != 1 else "waits in")
        # (ranks waiting elsewhere for these, through other groups, are said apart: they do not wait in this op)
        behind = sorted(blocked - set(joined) - set(ranks))
        message = f"{_ranks(ranks)} {verb} {where} that {_ranks(joined)} {did}" + (
            f"; {_ranks(behind)} {'is' if len(behind) == 1 else 'are'} blocked behind "
            f"{'it' if len(ranks) == 1 else 'them'}" if behind else "") + ": the suspect if this is a hang"
        reason = (f"{_ranks(ranks)}'s records end before it; a hang if {'it' if len(ranks) == 1 else 'they'} "
                  f"never issue{'s' if len(ranks) == 1 else ''} it, ranks still computing if the dumps were taken "
                  f"moments after: their file times do not say how long the others waited")
    if w.issued:
        reason += (f"; {split_group_name(w.group.name)[1] or 'its backend'} reports no completion to the "
                   "recorder (torch's FlightRecorderHook retires its ops when issued): the ranks ahead may wait "
                   "in this op or later ones, and only the sequence gap shows the hang")
    return Finding(
        kind, w.group.name, w.group.desc, None if p2p else w.seq, ranks, tuple(sorted(blocked)),
        op_name(w.sig), site_text(w.site), message, tuple(details), True, w.created_ns, reason,
        certain or bool(failed) or gone)


def _went_on(ctx: _Context, w: Wait, ranks: tuple[int, ...]) -> str | None:
    """'rank 2 recorded events 6.0 s' for the ranks the recorder proves absent (Wait.outlived)."""
    gone = sorted(set(ranks) & set(w.outlived))
    if not gone:
        return None
    last = max(ctx.traces[r].last_event_ns or 0 for r in gone)
    return f"{_ranks(gone)} recorded events until {duration(last - w.created_ns)}"


def _waiting_details(w: Wait, failed: set[int] | frozenset[int] = frozenset()) -> tuple[str, ...]:
    waiting = sorted((set(w.joined) | {w.rank}) - failed) if not w.p2p else [w.rank]
    line = f"{_ranks(waiting)} wait{'s' if len(waiting) == 1 else ''} in {describe(w.sig)}"
    if w.site is not None:
        line += f" issued at {site_text(w.site)}"
    return (line,)


def _timeout_findings(waits: list[Wait], roots: list[Finding]) -> list[Finding]:
    explained = {(f.pg_name, f.collective_seq_id) for f in roots}
    out: dict[tuple, list[Wait]] = {}
    for w in waits:
        if w.timed_out and (w.group.name, w.seq) not in explained:
            out.setdefault((w.group.key, w.seq, w.p2p), []).append(w)
    findings = []
    for ws in out.values():
        w = ws[0]
        ranks = tuple(sorted(x.rank for x in ws))
        findings.append(Finding(
            F.TIMEOUT, w.group.name, w.group.desc, None if w.p2p else w.seq, (), ranks, op_name(w.sig),
            site_text(w.site),
            f"{op_name(w.sig)} (collective {w.seq} of group {w.group.label}) timed out on ranks "
            f"{format_ranks(ranks)}", _waiting_details(w), False, w.created_ns,
            "the recorder marks it retired without completing: the watchdog gave up on it"))
    return findings


def _missing_dump_findings(ctx: _Context, roots: list[Finding], errors: list[InputError],
                           scope: frozenset[int] | None = None) -> list[Finding]:
    named = {r for f in roots if f.root_cause for r in f.culprit_ranks if r not in ctx.traces}
    world = ctx.membership.world_size
    missing = sorted(set(range(world) if scope is None else scope) - set(ctx.traces) - named)
    if not missing:
        return []
    how = "" if not ctx.membership.world_size_inferred else " (world size inferred from the highest rank seen)"
    theirs = sorted({e.file for e in errors if e.rank in missing})
    unreadable = f"; {len(errors)} files could not be read" if errors else ""
    if theirs:
        unreadable += f" ({', '.join(theirs[:3])}{', ...' if len(theirs) > 3 else ''})"
    return [Finding(
        F.MISSING_DUMP, "", "", None, tuple(missing), (), None, None,
        f"no usable dump for rank{'s' if len(missing) > 1 else ''} {format_ranks(missing)} of a world of "
        f"{world}{how}{unreadable}: collectives involving {'them' if len(missing) > 1 else 'it'} cannot be checked",
        (), False, None, "the world has ranks no readable dump speaks for")]
