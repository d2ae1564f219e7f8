"""The job-level view's evidence: ONE bundle per hang for the whole job (docs/multi-node.md).

When the unscoped analysis of every pod's ranks finds a new root cause, the culprits' and a few
blocked ranks' pickles (call sites) and stacks are fetched through their pods' sidecars (the peers
source's PickleFetcher), within one deadline; the same engine runs again on the snapshots with those
frames, so the report carries the collective's call site; and the bundle (every rank's recorder, the
stacks, the report) opens with where the ranks are, grouped ("3 ranks (0-2) wait in all_reduce
(collective 16 of group 0 (default_pg)) at train.py:44 train_step; rank 3: after all_reduce ..., now
at train.py:41 load_batch") and the line each culprit hangs on, read from its stack (where.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from frexport import logs
from frexport.analysis.engine import Options, analyze
from frexport.analysis.findings import Diagnosis
from frexport.analysis.report import render_text
from frexport.evidence.bundle import Bundle, BundleWriter
from frexport.evidence.fetch import Raw, Stacks, job_wanted, split
from frexport.evidence.sink import IncidentSink
from frexport.evidence.where import now_line, where_ranks
from frexport.live.sink import Pass
from frexport.model.dump import RankDump
from frexport.model.peer_rows import collision_text
from frexport.model.rank_trace import build_rank_trace
from frexport.sources.handlers import PickleFetcher

MAX_FETCHED_CULPRITS = 8  # with blocked_stacks (4): at most 12 ranks' pickles and stacks in memory at once


class JobEvidenceSink(IncidentSink):
    thread_name = "frexport-job-evidence"

    def __init__(self, writer: BundleWriter, fetcher: PickleFetcher[Any], window: int, pyspy: bool = True,
                 deadline_s: float = 20.0, blocked_stacks: int = 4) -> None:
        super().__init__(writer)
        self.fetcher = fetcher
        self.window = window
        self.pyspy = pyspy
        self.deadline_s = deadline_s
        self.blocked_stacks = blocked_stacks

    def wants(self, p: Pass) -> bool:
        # a pod's ranks going down is its own sidecar's bundle; a hang is the job's
        return p.result is not None and bool(p.result.new_root_causes)

    def write_incident(self, p: Pass) -> str | None:
        assert p.result is not None
        roots = p.result.new_root_causes
        culprits = sorted({r for f in roots for r in f.culprit_ranks})
        blocked = sorted({r for f in roots for r in f.blocked_ranks} - set(culprits))
        # a hang inside a collective has no culprit: its members' stacks say where they are
        if len(culprits) > MAX_FETCHED_CULPRITS:  # bounded memory: each fetched pickle may be 32 MiB
            logs.get().warning("job bundle: %d culprit ranks; the recorders and stacks of the first %d are fetched",
                               len(culprits), MAX_FETCHED_CULPRITS)
        focus = (culprits[:MAX_FETCHED_CULPRITS] or blocked[: self.blocked_stacks]) + [
            r for r in blocked if r not in culprits][: self.blocked_stacks]
        focus = list(dict.fromkeys(focus))
        fetched_ns = time.time_ns()  # before the fetch: a lower bound of when these were dumped
        raw, stacks = self._fetch(focus)
        # seen when the live snapshot was: the pickle carries no poll time, and waits are timed by it. A
        # rank the pass had no snapshot of (its pod had not sent it yet) is seen now: the bundle then
        # says what it was doing, not that it left no dump.
        world = max((d.world_size or 0 for d in p.dumps.values()), default=0) or None
        framed = {r: replace(d, dumped_at_ns=p.dumps[r].dumped_at_ns if r in p.dumps else fetched_ns,
                             declared_world_size=p.dumps[r].world_size if r in p.dumps else world)
                  for r, d in self.fetcher.decode_pickles(raw).items()}
        # only bodies that are a rank's recorder go into the bundle as its raw data: junk a peer sends
        # for its "culprit" is left out (decode_pickles logged it), the rank's snapshot stands for it
        raw = {r: b for r, b in raw.items() if r in framed}
        dumps = {**p.dumps, **framed}
        diagnosis = self._reanalyze(dumps, p) or p.result.diagnosis
        where = where_ranks(dumps, framed, stacks, set(culprits))
        hangs = {r: line for r in culprits if (line := now_line(stacks.get(r, {})))}
        head = ["where the ranks are:"] + [f"  {w}" for w in where]
        head += [f"rank {r} hangs at {line} (from its stack)" for r, line in sorted(hangs.items())]
        # ranks two peers claim (sources/peers.py): the bundle says whose claim it used, so a reader can
        # tell a hostile or misconfigured pod from the hang
        collisions = dict(self.fetcher.collisions)
        head += [f"rank {r} is claimed by peers {', '.join(([owner] if owner else []) + list(others))}: "
                 f"{collision_text(owner)}" for r, (owner, others) in sorted(collisions.items())[:64]]
        taken, sent = self.fetcher.cut
        if taken < sent:  # never a finding on a cut job without saying so
            head.insert(0, f"the job view held {taken} of the {sent} ranks its peers sent (over max_ranks): "
                           "this report rests on those")
        text = "\n".join(head) + "\n\n" + render_text(diagnosis)
        report = {**diagnosis.to_json(), "ranks_not_taken": sent - taken,
                  "where": where, "culprit_stack_lines": {str(r): v for r, v in hangs.items()},
                  "rank_collisions": {str(r): {"used": owner, "refused": list(others)}
                                      for r, (owner, others) in sorted(collisions.items())[:1024]}}
        reason = next((f.kind for f in diagnosis.findings if f.root_cause), roots[0].kind)
        return self.writer.write(Bundle(reason, text, report, dumps, raw, stacks))

    def _fetch(self, focus: list[int]) -> tuple[Raw, Stacks]:
        wanted = job_wanted(self.fetcher, focus, self.pyspy)
        return split(self.fetcher.fetch_all(wanted, self.deadline_s), say_failures="job bundle")

    def _reanalyze(self, dumps: dict[int, RankDump], p: Pass) -> Diagnosis | None:
        """The same engine on the snapshots with the fetched frames: the report gets call sites."""
        traces = []
        for dump in dumps.values():  # one rank whose trace cannot be built is left out, not every call site
            if dump.rank is None:
                continue
            try:
                traces.append(build_rank_trace(dump, tail=self.window))
            except Exception:  # noqa: BLE001 - any one rank's data, however odd, costs only that rank
                logs.get().exception("job bundle: rank %d's trace could not be built; re-analysed without it",
                                     dump.rank)
        try:
            assert p.result is not None  # (for mypy) write_incident's
            d = analyze(traces, options=Options(stall_after_s=p.result.stall_after_s, clock=True))
        except Exception:  # noqa: BLE001 - the live diagnosis is still a report
            logs.get().exception("re-analysis with frames failed; the bundle has the live diagnosis")
            return None
        return d if any(f.root_cause for f in d.findings) else None
