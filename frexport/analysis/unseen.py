"""Waits the recorder cannot see: a rank whose stack is inside a torch.distributed call that its Flight
Recorder does not show as unfinished is waiting there all the same.

gloo records no send/recv at all (torch 2.13 to 2.15): a pipeline whose stages deadlock in
point-to-point ops leaves dumps that look like a healthy job. Only the ranks' stacks, taken at one
look beside the dumps, show each rank blocked in send or recv. So the stacks are read as evidence:

- every rank the stacks show inside a send or recv, whose recorder holds no point-to-point op at all
  (gloo's), waits where the recorder cannot see; the job is never `healthy` then. So does a rank the
  stacks show inside a collective whose recorder shows nothing unfinished but ops known only to be
  issued (torch 2.15's hook on a backend that reports no completion: every rank stuck inside the same
  collective reads like a job between collectives). (Elsewhere collectives are recorded to the end: a
  stack inside one its dump shows finished was taken a moment later than the dump, no hidden wait.)
- where the stacks hold each call's arguments (py-spy's `dump --locals`), each send and recv names its
  peer, and the point-to-point wait-for graph decides: a rank that sends to a peer which receives from
  another rank, while a third rank waits to receive from the sender, sent to the wrong peer (the
  culprit); a closed loop of ranks each waiting for the next, with no such send, is a deadlock whose
  culprit the stacks cannot name;
- without peers (faulthandler's text, py-spy without --locals) the diagnosis is inconclusive, and
  says where every rank waits;
- where the recorder does show a hang, a rank it makes a root cause of its own (its peers wait for it
  in a collective it never issued) that the stacks show inside such an op is blocked there, not a
  culprit: with one other root cause left, it is folded under it as a consequence, with the peer it
  waits for where py-spy names it (`fold_blocked`), so a hang has one root cause however many pipeline
  stages wait behind it.

One look at stacks cannot time a wait: a send and its recv caught in flight look like this too. The
recorder's silence over the whole look (every rank blocked, no collective unfinished) and a closed
graph are what make it a hang; a single rank caught in a recv is reported as a suspect.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

from frexport.analysis import findings as F
from frexport.analysis.findings import Finding, format_ranks
from frexport.analysis.whereabouts import distributed_call, user_frame
from frexport.model.call_site import Frame, Threads, frame_text

P2P = {"send": "dst", "recv": "src", "isend": "dst", "irecv": "src"}  # call -> the argument naming the peer


@dataclass(frozen=True)
class Blocked:
    rank: int
    call: str  # the torch.distributed function (recv, send, barrier, ...)
    site: Frame  # the user's frame that called it
    peer: int | None = None  # send/recv: the global rank it waits for, where the stacks say


def blocked_ranks(stacks: dict[int, Threads], calls: dict[int, tuple[str, dict[str, str]]]) -> dict[int, Blocked]:
    """Ranks whose training thread is inside a torch.distributed call, with the peer of a send/recv
    where py-spy's arguments name it (`dst: 0`; `None` or another object names none)."""
    out = {}
    for rank, threads in stacks.items():
        found = user_frame(threads)  # where the rank is now: the one rule (whereabouts.py)
        call = distributed_call(*found) if found is not None else None
        if found is None or call is None:
            continue
        frames, i = found
        peer = None
        name, args = calls.get(rank, (None, {}))
        if name == call and call in P2P and args.get(P2P[call], "").isdigit():
            peer = int(args[P2P[call]])
        out[rank] = Blocked(rank, call, frames[i], peer)
    return out


def unrecorded(blocked: dict[int, Blocked], records_p2p: set[int] | frozenset[int],
               issue_only: set[int] | frozenset[int] = frozenset()) -> dict[int, Blocked]:
    """The ranks the stacks show inside an op their recorder does not show them in: a send or recv where
    the recorder holds no point-to-point op (gloo's), a collective where it knows ops only as issued."""
    return {r: b for r, b in blocked.items()
            if (b.call in P2P and r not in records_p2p) or (b.call not in P2P and r in issue_only)}


def fold_blocked(findings: list[Finding], unseen: dict[int, Blocked]) -> list[Finding]:
    """Root causes whose culprits the stacks show inside an op the recorder does not show are ranks blocked
    there, not culprits: their peers waited for them in a collective they never issued because they wait
    in a recv (a pipeline stage feeding a blocked one). Where one other root cause remains, they are folded
    under it as its consequences: one root cause per hang. A rank whose peer the stacks name is folded only
    where that peer is the root cause's culprit or blocked (else it waits for something else)."""
    roots = [f for f in findings if f.root_cause]
    inside = [f for f in roots if f.culprit_ranks and set(f.culprit_ranks) <= set(unseen)]
    rest = [f for f in roots if not any(f is g for g in inside)]
    if not inside or len(rest) != 1:
        return findings
    root = rest[0]
    behind = {*root.culprit_ranks, *root.blocked_ranks, *(r for f in inside for r in f.culprit_ranks)}
    folded = [f for f in inside if all(unseen[r].peer is None or unseen[r].peer in behind for r in f.culprit_ranks)]
    if not folded:
        return findings
    later = tuple(sorted((_blocked_inside(f, unseen, root) for f in folded), key=lambda c: c.blocked_ranks))
    blocked = set(root.blocked_ranks).union(*(c.blocked_ranks for c in later)) - set(root.culprit_ranks)
    new = replace(root, blocked_ranks=tuple(sorted(blocked)), consequences=root.consequences + later,
                  details=root.details + tuple(f"consequence: {c.message}" for c in later))
    gone = {id(f) for f in folded}
    return [new if f is root else f for f in findings if id(f) not in gone]


def _blocked_inside(f: Finding, unseen: dict[int, Blocked], root: Finding) -> Finding:
    """A root cause's finding rewritten as what it is: its ranks blocked in an unrecorded op, their peers
    waiting for them."""
    where = []
    for r in f.culprit_ranks:
        b = unseen[r]
        if b.peer is None:
            peer = "peer not known"
        else:
            role = "the culprit" if b.peer in root.culprit_ranks else "blocked too"
            peer = f"{'to' if P2P.get(b.call) == 'dst' else 'from'} rank {b.peer}, {role}"
        where.append(f"rank {r} waits in torch.distributed {b.call} ({peer}) at {frame_text(b.site)}")
    message = "; ".join(where) + ": blocked where the recorder does not show it, not a culprit"
    if f.blocked_ranks:
        group = f"{f.pg_name} ({f.pg_desc})" if f.pg_desc else f.pg_name
        message += (f"; {_ranks(f.blocked_ranks)} {'waits' if len(f.blocked_ranks) == 1 else 'wait'} for "
                    f"{'it' if len(f.culprit_ranks) == 1 else 'them'} in {f.op} (collective {f.collective_seq_id} "
                    f"of group {group})")
    return replace(f, culprit_ranks=(), blocked_ranks=tuple(sorted({*f.culprit_ranks, *f.blocked_ranks})),
                   message=message, root_cause=False,
                   reason="the stacks beside the dumps show it inside a call its recorder does not record "
                          "(gloo records no point-to-point op): it waits, and what it waits for is behind the "
                          "root cause")


def _ranks(ranks) -> str:
    ranks = sorted(set(ranks))
    return f"rank{'s' if len(ranks) != 1 else ''} {format_ranks(ranks)}"


def unseen_waits(blocked: dict[int, Blocked], records_p2p: set[int] | frozenset[int], explained: set[int],
                 issue_only: set[int] | frozenset[int] = frozenset()) -> list[Finding]:
    """`records_p2p`: ranks whose recorder holds point-to-point ops (NCCL's does, gloo's never): there the
    recorder shows such waits itself. `issue_only`: ranks whose recorder shows nothing unfinished but
    ops known only to be issued: there a collective is not seen to the end either. Elsewhere a stack
    inside a collective that its dump shows finished was taken at another moment than the dump, not a
    hidden wait. `explained`: ranks a finding already names. One finding for the ranks left, which wait
    where the recorder cannot see."""
    unseen = {r: b for r, b in unrecorded(blocked, records_p2p, issue_only).items() if r not in explained}
    if not unseen:
        return []
    where = tuple(f"rank {r} waits in torch.distributed {b.call}"
                  + (f" ({'to' if P2P.get(b.call) == 'dst' else 'from'} rank {b.peer})" if b.peer is not None else "")
                  + f" at {frame_text(b.site)}" for r, b in sorted(unseen.items()))
    kind = F.UNMATCHED_P2P
    site = frame_text(min(unseen.values(), key=lambda b: b.rank).site)
    closed = _closed(unseen)
    wrong = _misdirected(unseen)
    if wrong is not None:
        r, d, expecting = wrong
        b = unseen[r]
        return [Finding(
            kind, "", "", None, (r,), tuple(sorted(set(unseen) - {r})), b.call, frame_text(b.site),
            f"rank {r} sends to rank {d}, which waits for another rank, while {_ranks(expecting)} "
            f"{'waits' if len(expecting) == 1 else 'wait'} to receive from rank {r}: a send to the wrong peer; "
            f"{_ranks(set(unseen) - {r})} {'is' if len(unseen) == 2 else 'are'} blocked", where, True, None,
            f"the stacks (py-spy's arguments) show rank {r} in send(dst={d}) while rank {d} is "
            f"{_doing(unseen.get(d))} and {_ranks(expecting)} in recv(src={r}); the recorder shows no "
            f"unfinished op on these ranks (gloo records no point-to-point op)"
            + (CLOSED if closed else OPEN), closed)]
    loop = _loop(unseen)
    if loop:
        return [Finding(
            kind, "", "", None, (), tuple(sorted(unseen)), None, site,
            f"{_ranks(loop)} wait for each other in send/recv ({' -> '.join(map(str, loop + (loop[0],)))}): a "
            f"deadlock the recorder cannot see; which side is wrong the stacks do not say", where, True, None,
            "the stacks show each rank of the loop in a send or recv whose peer is the next, and none "
            "receiving what the other sends; the recorder shows no unfinished op on these ranks"
            + (CLOSED if closed else OPEN), closed)]
    every = len(unseen)
    return [Finding(
        kind, "", "", None, (), tuple(sorted(unseen)), None, site,
        f"{_ranks(unseen)} {'waits' if every == 1 else 'wait'} in torch.distributed "
        f"{'/'.join(sorted({b.call for b in unseen.values()}))}, which the recorder does not show: a hang "
        f"the recorder cannot see, or ops caught in flight; who is at fault the stacks do not say",
        where, True, None,
        "the stacks beside the dumps show these ranks inside the calls and their recorders show no unfinished "
        "op (gloo records no point-to-point op; a backend that reports no completion has its collectives "
        "retired when issued); the stacks name no peer (py-spy dump --locals would)",
        False)]


CLOSED = "; every rank waits for a rank that waits too and no send meets its recv: none can move"
OPEN = "; some peer is not blocked in a send or recv at this look: one look cannot tell a hang from ops in flight"


def _closed(unseen: dict[int, Blocked]) -> bool:
    """No rank of the graph can move: each waits in a send/recv for a rank also blocked in one, and no
    send meets its recv (a matched pair would complete and let the others go on)."""
    for r, b in unseen.items():
        if b.call not in P2P or b.peer is None or b.peer not in unseen:
            return False
        d = unseen[b.peer]
        if d.call in P2P and P2P[d.call] != P2P[b.call] and d.peer == r:
            return False
    return True


def _doing(b: Blocked | None) -> str:
    if b is None:
        return "in no torch.distributed call"
    return f"in {b.call}" + (f"({P2P[b.call]}={b.peer})" if b.peer is not None and b.call in P2P else "")


def _misdirected(unseen: dict[int, Blocked]) -> tuple[int, int, tuple[int, ...]] | None:
    """(sender, its destination, the ranks expecting from it): a send no one takes while others wait
    for that sender's data. The lowest such sender first (the order of ranks, not of files)."""
    for r, b in sorted(unseen.items()):
        if P2P.get(b.call) != "dst" or b.peer is None:
            continue
        d = unseen.get(b.peer)
        if d is not None and P2P.get(d.call) == "src" and d.peer == r:
            continue  # matched: in flight
        expecting = tuple(sorted(e for e, x in unseen.items()
                                 if e not in (r, b.peer) and P2P.get(x.call) == "src" and x.peer == r))
        if expecting:
            return r, b.peer, expecting
    return None


def _loop(unseen: dict[int, Blocked]) -> tuple[int, ...]:
    """A closed loop of ranks each waiting for the next (every peer known), from the lowest rank."""
    for start in sorted(unseen):
        path, r = [], start
        while r in unseen and unseen[r].peer is not None and r not in path:
            path.append(r)
            r = cast(int, unseen[r].peer)  # (for mypy) not None: the loop's condition
        if path and r in path:
            loop = path[path.index(r):]
            i = loop.index(min(loop))
            return tuple(loop[i:] + loop[:i])
    return ()
