"""Live diagnosis: the post-mortem engine on every rank's latest snapshot, plus what only time tells.

Each pass builds rank traces from the latest snapshots, with each rank's poll
time as "seen at", and runs the same analysis as `frexport analyze`. A rank is
only said to be missing from a collective, or a collective stuck, once that has
lasted longer than the stall threshold; the threshold follows the job: a few
times its observed step time, never below `min_stall_after`, never above a
fraction of the collective timeout (so frexport speaks before PyTorch's watchdog
kills the job). Rank statuses:
- stalled: culprit of a hang (never issued the collective its peers wait in, or
  stuck in one that never finishes);
- blocked: waits, directly or through other groups, for a stalled rank;
- desynced: ran a different op, sizes or dtypes than its peers, or its peers
  completed collectives in a group past the last one it issued, and it was seen the stall
  threshold after they issued them;
- straggling: completes, but reaches collectives consistently after its peers;
- down: its process is gone (its socket refuses, its pid is gone): not stalled, whatever its last
  snapshot says; its stall series end (FrexportSourceDown speaks for it);
- ok.
A slow rank that keeps progressing is never stalled: its peers' waits end.

The analysis is scoped to the ranks this sidecar watches (its sockets, URLs and dump
files: the ranks it has snapshots of, plus those whose worker server is down). A rank
of another pod is never named a culprit, never "missing its dump", and never given a
status here; local ranks that wait for one are blocked (finding `remote_wait`), and the
job-wide rules join every pod's wait series to find the culprit (docs/multi-node.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frexport import logs
from frexport.analysis import findings as F
from frexport.analysis.engine import Options, analyze
from frexport.analysis.findings import DESYNC_KINDS, STALL_KINDS, Diagnosis
from frexport.analysis.pass_memo import PassMemo
from frexport.config import Analysis
from frexport.live.step_time import StepTime
from frexport.model.dump import RankDump
from frexport.model.rank_trace import PROVEN_DONE_BYTE, RankTrace, compiled_passed_by_peers
from frexport.model.trace_window import TraceWindow

OK, STALLED, BLOCKED, DESYNCED, STRAGGLING, DOWN = "ok", "stalled", "blocked", "desynced", "straggling", "down"
STATUSES = (OK, STALLED, BLOCKED, DESYNCED, STRAGGLING, DOWN)


@dataclass
class LiveResult:
    diagnosis: Diagnosis
    statuses: dict[int, str]
    stall_after_s: float
    new_root_causes: list[F.Finding] = field(default_factory=list)
    scope: frozenset[int] = frozenset()  # the ranks this sidecar watches: the only ones it may judge
    down: frozenset[int] = frozenset()  # watched ranks whose worker server refuses: gone, not waiting


class LiveAnalysis:
    """Runs a pass on the snapshots it is given and keeps the latest result for the exporters to read
    (`latest` is replaced whole, so a reader never sees half a pass)."""

    def __init__(self, cfg: Analysis, scoped: bool = True) -> None:
        self.cfg = cfg
        # False for the job-level view: it gathers every pod's ranks, so a rank the world size implies
        # but no pod reports is missing, as in `frexport analyze`
        self.scoped = scoped
        self.latest: LiveResult | None = None
        self._reported: set[tuple] = set()
        self.failed_ranks: set[int] = set()  # ranks whose snapshot could not be analyzed (logged once)
        # rank -> (snapshot, its trace) of the last pass; the snapshot object is the key (a new poll is
        # a new object), so a rank not polled since costs nothing in the next pass, and a rank polled
        # again has its trace moved along its window (model/trace_window.py), not rebuilt
        self._traces: dict[int, tuple[RankDump, TraceWindow]] = {}
        self._memo = PassMemo()  # groups built, stragglers judged again only where what they rest on moved
        self._step = StepTime()  # each rank's period, followed from pass to pass

    def run(self, dumps: dict[int, RankDump], down: set[int] | frozenset[int] = frozenset(),
            contested: frozenset[int] = frozenset()) -> LiveResult:
        """`down`: watched ranks whose process is known gone (a refused socket, a pid gone), maybe
        without a snapshot; their last snapshots still take part in the diagnosis (what they were
        doing is the evidence), their status is `down`. `contested`: ranks two sources claim at once,
        neither believed: never judged (engine.Options.contested)."""
        stall_after = self.stall_after(dumps)
        traces: list[RankTrace] = []
        cache, self._traces = self._traces, {}
        for d in dumps.values():
            if d.rank is None:
                continue
            hit = cache.get(d.rank)
            if hit is not None and hit[0] is d:  # the same snapshot as in the last pass: the same trace
                self._traces[d.rank] = hit
                assert hit[1].trace is not None  # (for mypy) cached after its update
                traces.append(hit[1].trace)
                continue
            try:  # one rank's data must never disable the analysis of all
                follower = hit[1] if hit is not None else TraceWindow(self.cfg.window)
                trace = follower.update(d)
                self._traces[d.rank] = (d, follower)
                traces.append(trace)
            except Exception as exc:  # noqa: BLE001 (the rank's follower is dropped: the next one starts afresh)
                if d.rank not in self.failed_ranks:
                    logs.get().error("rank %s left out of the analysis: %s: %s", d.rank, type(exc).__name__, exc,
                                     extra={"rank": d.rank})
                self.failed_ranks.add(d.rank)
            else:
                self.failed_ranks.discard(d.rank)
        # a rank whose trace failed is still one this sidecar watches: in scope, never "remote"
        scope = frozenset(d.rank for d in dumps.values() if d.rank is not None) | frozenset(down)
        diagnosis = analyze(traces, options=Options(stall_after_s=stall_after, clock=True,
                                                    straggler_lateness_s=self.cfg.straggler_lateness,
                                                    scope=scope if self.scoped else None,
                                                    contested=frozenset(contested) - set(dumps)),
                             memo=self._memo)
        statuses = {r: s for r, s in statuses_of(diagnosis, traces, int(stall_after * 1e9)).items()
                    if r in scope or not self.scoped}
        statuses.update((r, DOWN) for r in down)
        roots = [f for f in diagnosis.findings if f.root_cause]
        keys = {_hang_key(f) for f in roots}
        new = [f for f in roots if _hang_key(f) not in self._reported]
        self._reported = keys  # a root cause that clears and returns is new again
        self.latest = LiveResult(diagnosis, statuses, stall_after, new, scope, frozenset(down))
        return self.latest

    def stall_after(self, dumps: dict[int, RankDump]) -> float:
        if self.cfg.stall_after is not None:
            return self.cfg.stall_after
        step = self._step.step_s(dumps)
        threshold = max(self.cfg.min_stall_after, 5 * step if step else 0.0)
        timeouts = [e.timeout_ms for d in dumps.values() for e in d.entries[-1:] if e.timeout_ms]
        if timeouts:
            threshold = min(threshold, self.cfg.max_stall_fraction_of_timeout * min(timeouts) / 1000)
        return threshold


def _hang_key(f: F.Finding) -> tuple:
    """Which hang a root cause is. Not its kind: that sharpens as evidence arrives (the view hears of a
    hang before the culprit's pod sends its rank: 'left no dump', then 'never issued it'), and a
    sharper word for the same hang is not a new incident."""
    return f.pg_name, f.collective_seq_id, f.culprit_ranks


def statuses_of(d: Diagnosis, traces: list[RankTrace], stall_after_ns: int) -> dict[int, str]:
    out: dict[int, str] = {r: OK for r in d.ranks}

    def mark(ranks, status: str, over: tuple[str, ...] = (OK,)) -> None:
        for r in ranks:
            if out.get(r, OK) in over:
                out[r] = status

    for f in d.findings:
        if f.root_cause and f.kind in STALL_KINDS:
            mark(f.culprit_ranks or f.blocked_ranks, STALLED, (OK, BLOCKED, STRAGGLING, DESYNCED))
        elif f.kind in DESYNC_KINDS:
            mark(f.culprit_ranks, DESYNCED, (OK, BLOCKED, STRAGGLING))
    for f in d.findings:
        if f.root_cause or f.kind == F.REMOTE_WAIT:
            mark(f.blocked_ranks, BLOCKED, (OK, STRAGGLING))
        elif f.kind == F.STRAGGLER:
            mark(f.culprit_ranks, STRAGGLING)
    # members that finished a collective their peers still wait in, or that a member never issued, failed
    # out of it (hang.py): that is no completion the others fell behind
    failed = {(w.group.name, m, w.seq) for w in d.waits for m in w.left}
    mark(_passed_by_peers(traces, stall_after_ns, failed), DESYNCED, (OK, STRAGGLING, BLOCKED))
    return out


def _passed_by_peers(traces: list[RankTrace], stall_after_ns: int,
                     failed: set[tuple[str, int, int]] | frozenset = frozenset()) -> set[int]:
    """Ranks whose peers completed collectives in a group beyond the last one the rank issued, although
    the rank was seen the stall threshold after those peers issued them.

    A collective cannot complete without every member, so this means the rank's collectives
    pair up with different ones on its peers (it skipped or added one) even where the ops look alike.
    Ranks are polled one after another: a rank seen sooner than that may simply have issued them just
    after its snapshot, while its peers, polled later, saw them complete."""
    seen_at = [t.seen_at_ns for t in traces]
    if not failed and len({t.rank for t in traces}) == len(traces):
        found = compiled_passed_by_peers(traces, seen_at, stall_after_ns)
        if found is not NotImplemented:
            return {traces[i].rank for i in found}
    issued: dict[str, dict[int, int]] = {}
    completed: dict[str, dict[int, tuple[int, int]]] = {}  # group -> rank -> (seq, created_ns) completed last
    seen: dict[int, int | None] = {}
    for t, seen_ns in zip(traces, seen_at):
        seen[t.rank] = seen_ns
        for name, g in t.groups.items():
            if not len(g.seq):
                continue
            issued.setdefault(name, {})[t.rank] = g.seq[-1]
            # (an op only known issued that the rank went past is FINISHED, yet proves nothing completed)
            proven = g.flags.tobytes().translate(PROVEN_DONE_BYTE)
            last_done = proven.rfind(1)
            while failed and last_done >= 0 and (name, t.rank, g.seq[last_done]) in failed:
                last_done = proven.rfind(1, 0, last_done)
            if last_done >= 0:
                completed.setdefault(name, {})[t.rank] = (g.seq[last_done], g.created_ns[last_done])
    out = set()
    for name, by_rank in issued.items():
        done = completed.get(name)
        if not done:
            continue
        # the highest completed seq among a rank's peers is the group's highest, or the second highest
        # for the rank that holds it: one pass over the group, not one per member (4096^2 at scale)
        best_rank, best = max(done.items(), key=lambda kv: kv[1][0])
        second = max((v for peer, v in done.items() if peer != best_rank), default=None, key=lambda v: v[0])
        for rank, last in by_rank.items():
            beyond = second if rank == best_rank else best
            seen_ns = seen.get(rank)
            if beyond is not None and beyond[0] > last and seen_ns and seen_ns - beyond[1] >= stall_after_ns:
                out.add(rank)
    return out
