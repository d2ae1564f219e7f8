"""Why a straggler is late: its profile beside a peer's, as time a step in the functions that differ.

Each rank's trace is reduced to its training thread (the one that ran the most ops) and, per
function, the time that thread spent inside it (the union of its events: recursion and overlaps
counted once), divided by the steps the trace holds (DataLoader batches where the trace has them,
else the calls of its most frequent collective, else seconds). The straggler's biggest excess over
the peer names the cause; where several nested functions carry the same excess, a label the code
set (`record_function`: the DataLoader's `enumerate(DataLoader)#...__next__`) is named, else the
innermost Python function (its callers hold the whole step); the innermost function of the job's
own code with that excess is given too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from frexport.model.profile_trace import HostEvent, ProfileTrace

_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#\w+\.__next__$")
_COLLECTIVE = re.compile(r"^(gloo|nccl\w*|xccl|c10d|mpi|ucc|[a-z0-9_]+):[a-z_]+$")
_PYFUNC = re.compile(r"^(.*?)\((\d+)\): (.+)$")
_OURS = ("frexport/agent/", "torch/profiler/", "torch/autograd/profiler", "threading.py")
_SHARE = 0.8  # functions whose excess is at least this share of the biggest carry the same delay


@dataclass(frozen=True)
class RankProfile:
    rank: int
    tid: int | None
    steps: float
    unit: str  # what a step was counted from
    seconds: dict[str, float]  # function -> seconds a step in it
    kinds: dict[str, str]  # function -> its event category
    span_s: float


def summarize(rank: int, trace: ProfileTrace) -> RankProfile:
    by_tid = Counter(e.tid for e in trace.events if e.cat == "cpu_op") or Counter(e.tid for e in trace.events)
    if not by_tid:
        return RankProfile(rank, None, 0.0, "none", {}, {}, trace.span_us / 1e6)
    tid = by_tid.most_common(1)[0][0]
    spans: dict[str, list[tuple[float, float]]] = {}
    kinds: dict[str, str] = {}
    for e in trace.events:
        if e.tid != tid or any(o in e.name for o in _OURS):
            continue
        name = label(e)
        spans.setdefault(name, []).append((e.ts_us, e.ts_us + e.dur_us))
        kinds.setdefault(name, e.cat)
    counts = {n: len(v) for n, v in spans.items()}
    loader = sum(c for n, c in counts.items() if n == "DataLoader.__next__")
    collectives = [c for n, c in counts.items() if kinds[n] == "user_annotation" and _COLLECTIVE.match(n)]
    if loader:
        steps, unit = float(loader), "DataLoader batches"
    elif collectives:
        steps, unit = float(max(collectives)), "calls of its most frequent collective"
    else:
        steps, unit = max(trace.span_us / 1e6, 1e-9), "seconds"
    seconds = {n: _union(v) / 1e6 / steps for n, v in spans.items()}
    return RankProfile(rank, tid, steps, unit, seconds, kinds, trace.span_us / 1e6)


def label(e: HostEvent) -> str:
    if _DATALOADER.match(e.name):
        return "DataLoader.__next__"
    m = _PYFUNC.match(e.name) if e.cat == "python_function" else None
    if m:
        return f"{m.group(3)} ({m.group(1).rsplit('/', 1)[-1]}:{m.group(2)})"
    return e.name


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@dataclass(frozen=True)
class Comparison:
    slow: RankProfile
    peer: RankProfile
    function: str | None  # the straggler's biggest excess, None where it has none
    deepest: str | None  # the innermost function of the job's own code with that excess

    def text(self) -> str:
        s, p = self.slow, self.peer
        if self.function is None:
            return (f"profiles: rank {s.rank} spent no more time a step than rank {p.rank} in any host function "
                    "its trace holds (its delay is not on the host side of its training thread)")
        a, b = s.seconds.get(self.function, 0.0), p.seconds.get(self.function, 0.0)
        line = f"rank {s.rank}: {a:.2f} s a step in {self.function}, rank {p.rank}: {b:.2f} s"
        if self.deepest and self.deepest != self.function:
            line += f" (innermost in the job's code: {self.deepest}, {s.seconds[self.deepest]:.2f} s a step)"
        return line

    def to_json(self) -> dict:
        return {"slow_rank": self.slow.rank, "peer_rank": self.peer.rank, "function": self.function,
                "deepest": self.deepest,
                "seconds_per_step": {str(r.rank): r.seconds.get(self.function, 0.0) if self.function else None
                                     for r in (self.slow, self.peer)},
                "steps": {str(r.rank): r.steps for r in (self.slow, self.peer)}, "step_unit": self.slow.unit,
                "text": self.text()}


def compare(slow: RankProfile, peer: RankProfile) -> Comparison:
    excess = {n: t - peer.seconds.get(n, 0.0) for n, t in slow.seconds.items()}
    top = max(excess.values(), default=0.0)
    if top <= 0.005:  # under 5 ms a step: noise, not a cause
        return Comparison(slow, peer, None, None)
    carrying = [n for n, x in excess.items() if x >= _SHARE * top]
    labelled = [n for n in carrying if slow.kinds[n] == "user_annotation"]
    if labelled:  # a label the code set: the outermost
        pick = max(labelled, key=lambda n: (slow.seconds[n], n))
    else:  # else the innermost Python function that is not a builtin (outer ones hold the whole step)
        named = [n for n in carrying if slow.kinds[n] == "python_function" and not n.startswith("<built-in")]
        pick = min(named or carrying, key=lambda n: (slow.seconds[n], n))
    own = [n for n in carrying if slow.kinds[n] == "python_function" and not _library(n)]
    deepest = min(own, key=lambda n: (slow.seconds[n], n)) if own else None
    return Comparison(slow, peer, pick, deepest)


def _library(name: str) -> bool:
    """A function of Python's or torch's own code, not the job's."""
    where = name.rsplit("(", 1)[-1]
    return name.startswith("<built-in") or where.startswith(("dataloader.py", "fetch.py", "functional.py",
                                                               "distributed_c10d.py", "c10d_logger.py"))
