"""The job-level view's evidence: ONE bundle per hang for the whole job (docs/multi-node.md).

When the unscoped analysis of every pod's ranks finds a new root cause, the culprits' and a few
blocked ranks' pickles (call sites) and stacks are fetched through their pods' sidecars, within one
deadline; the same engine runs again on the snapshots with those frames, so the report carries the
collective's call site; and the bundle (evidence.py's writer: every rank's recorder, the stacks, the
report) opens with where the ranks are, grouped ("3 ranks (0-2) wait in all_reduce (collective 16 of
group 0 (default_pg)) at train.py:44 train_step; rank 3: after all_reduce ..., now at train.py:41
load_batch") and the line each culprit hangs on, read from its stack.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Protocol

from frexport import logs
from frexport.analysis.engine import Options, analyze, format_ranks
from frexport.analysis.findings import Diagnosis
from frexport.export.evidence import PICKLE_HANDLER, STACK_HANDLERS, Bundle, EvidenceWriter, IncidentSink
from frexport.export.report import render_text
from frexport.live.sink import Pass
from frexport.model.call_site import Frame, frame_text, is_third_party, site_text
from frexport.model.dump import RankDump
from frexport.model.peer_rows import collision_text
from frexport.model.rank_trace import build_rank_trace


class JobFetcher(Protocol):
    """What the sink needs of the peers source (satisfied by sources/peers.PeersSource)."""

    def targets(self) -> list: ...

    def handlers(self, rank: int) -> frozenset[str]: ...

    def fetch_all(self, wanted: list, deadline_s: float) -> dict: ...

    def decode_pickles(self, raw: dict[int, bytes]) -> dict[int, RankDump]: ...


MAX_FETCHED_CULPRITS = 8  # with blocked_stacks (4): at most 12 ranks' pickles and stacks in memory at once


class JobEvidenceSink(IncidentSink):
    thread_name = "frexport-job-evidence"

    def __init__(self, writer: EvidenceWriter, fetcher: JobFetcher, window: int, pyspy: bool = True,
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
        hangs = {r: line for r in culprits if (line := hang_line(stacks.get(r, {}).get("traceback", "")))}
        head = ["where the ranks are:"] + [f"  {w}" for w in where]
        head += [f"rank {r} hangs at {line} (from its stack)" for r, line in sorted(hangs.items())]
        # ranks two peers claim (sources/peers.py): the bundle says whose claim it used, so a reader can
        # tell a hostile or misconfigured pod from the hang
        collisions = dict(getattr(self.fetcher, "collisions", {}))
        head += [f"rank {r} is claimed by peers {', '.join(([owner] if owner else []) + list(others))}: "
                 f"{collision_text(owner)}" for r, (owner, others) in sorted(collisions.items())[:64]]
        text = "\n".join(head) + "\n\n" + render_text(diagnosis)
        report = {**diagnosis.to_json(), "where": where, "culprit_stack_lines": {str(r): v for r, v in hangs.items()},
                  "rank_collisions": {str(r): {"used": owner, "refused": list(others)}
                                      for r, (owner, others) in sorted(collisions.items())[:1024]}}
        reason = next((f.kind for f in diagnosis.findings if f.root_cause), roots[0].kind)
        return self.writer.write(Bundle(reason, text, report, dumps, raw, stacks))

    def _fetch(self, focus: list[int]) -> tuple[dict[int, bytes], dict[int, dict[str, str]]]:
        targets = {t.rank: t for t in self.fetcher.targets()}
        wanted = []
        for r in focus:
            if r not in targets:
                continue
            listed = self.fetcher.handlers(r)
            if PICKLE_HANDLER in listed:
                wanted.append((targets[r], PICKLE_HANDLER))
            for handler in STACK_HANDLERS:
                if handler in listed and (handler != "pyspy_dump" or self.pyspy):
                    wanted.append((targets[r], handler))
        raw: dict[int, bytes] = {}
        stacks: dict[int, dict[str, str]] = {}
        for (rank, handler), body in self.fetcher.fetch_all(wanted, self.deadline_s).items():
            if not isinstance(body, bytes):
                logs.get().warning("job bundle: rank %d's %s: %s", rank, handler, getattr(body, "detail", body))
            elif handler == PICKLE_HANDLER:
                raw[rank] = body
            else:
                stacks.setdefault(rank, {})[STACK_HANDLERS[handler]] = body.decode(errors="replace")
        return raw, stacks

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


def where_ranks(dumps: dict[int, RankDump], framed: dict[int, RankDump], stacks: dict[int, dict[str, str]],
                culprits: set[int]) -> list[str]:
    """Ranks grouped by where they are: the collective each waits in (its call site, from any rank whose
    frames were fetched), else the last one it issued and, from its stack, the line it is on now."""
    sites: dict[tuple[str, int, bool], str] = {}
    for d in framed.values():
        for e in d.entries:
            if e.call_site is not None:
                sites.setdefault((e.pg_name, e.seq_id, e.is_p2p), site_text(e.call_site) or "")
    groups: dict[str, list[int]] = {}
    for rank, d in dumps.items():
        waiting = next((e for e in d.entries if not e.finished), None)
        if waiting is not None and rank not in culprits:
            key = (f"wait in {waiting.op} ({_coll(waiting)} of group {waiting.pg_name} ({waiting.pg_desc}))"
                   + (f" at {site}" if (site := sites.get((waiting.pg_name, waiting.seq_id, waiting.is_p2p)))
                      else ""))
        else:
            last = d.entries[-1] if d.entries else None
            key = (f"after {last.op} ({_coll(last)} of group {last.pg_name} ({last.pg_desc}))" if last
                   else "before any collective")
            line = hang_line(stacks.get(rank, {}).get("traceback", ""))
            key += f", now at {line}" if line else ", next (stack not fetched)"
        groups.setdefault(key, []).append(rank)
    out = []
    for key, ranks in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({format_ranks(ranks)})"
        out.append(f"{who} {key}" if key.startswith("wait") else f"{who}: {key}")
    return out


def _coll(e) -> str:
    return f"{'p2p op' if e.is_p2p else 'collective'} {e.seq_id}"


_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<name>\S+)')


def hang_line(traceback: str) -> str | None:
    """The user's line a rank is on, from a faulthandler-style traceback (most recent call first):
    in the thread that runs the script (its outermost frame is `<module>`), else any thread, the
    innermost frame that is neither torch, the standard library, site-packages nor frexport."""
    threads: list[list[Frame]] = []
    for raw in traceback.splitlines():
        if not raw.startswith(" ") and raw.strip():
            threads.append([])
        m = _FRAME_LINE.match(raw)
        if m:
            if not threads:
                threads.append([])
            threads[-1].append(Frame(m["name"], m["file"], int(m["line"])))
    threads.sort(key=lambda fs: 0 if fs and fs[-1].name == "<module>" else 1)
    for frames in threads:
        for f in frames:
            if not _foreign(f):
                return frame_text(f)
    return None


def _foreign(f: Frame) -> bool:
    name = f.filename
    return is_third_party(f) or "/frexport/" in name
