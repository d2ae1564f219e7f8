"""Tell training jobs apart when `analyze` is given several directories (or a glob over several jobs).

A hang is diagnosed within one job: ranks 0-3 of one job and 0-3 of another are not eight ranks,
and a culprit named across them is wrong. Each source (a directory, a prefix, the files of one
directory) is one job's ranks or a part of them (a node's directory). Sources join one job only when
their data agrees:
- no rank twice (a rank's JSON twin, the same dump in another format, is not a second rank: the
  same rank with the same first recorded entry is kept once; and a rank's other recorder, such as
  torch's dump file of its nccl2 recorder beside its gloo dump, is the same rank: its groups are
  other groups, and they are read together, model/recorders.py `merge_traces`);
- the same group layout where both dumps carry one (pg_config: each group's name and ranks, so the
  world size too), the same description for a group name both use, no rank beyond the other's world;
- recorder times that overlap: a job's ranks record the same minutes.
A source that could join two jobs cannot be placed (`Ambiguous`): the caller refuses, naming the
groups it found. Pure: traces in, groups of sources out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frexport.analysis.engine import format_ranks
from frexport.model.rank_trace import RankTrace
from frexport.model.recorders import merge_traces, other_recorder


@dataclass
class Source:
    """One path argument's (or one directory's) loaded ranks."""

    label: str
    traces: list[RankTrace]
    key: int = 0  # the caller's index of this source


@dataclass
class Job:
    sources: list[Source] = field(default_factory=list)
    # ranks two sources claim with different records: (the copy kept, the one left out). Never silent:
    # the caller reports the one left out as an input error
    claimed_twice: list[tuple[RankTrace, RankTrace]] = field(default_factory=list)

    @property
    def traces(self) -> list[RankTrace]:
        return [t for s in self.sources for t in s.traces]

    @property
    def ranks(self) -> set[int]:
        return {t.rank for t in self.traces}


class Ambiguous(Exception):
    """The sources cannot be told apart into jobs (the message names the groups found)."""


def layout(traces: list[RankTrace]) -> dict[str, tuple[int, ...]]:
    """Group name -> its ranks, from the pg_config any of these dumps carries."""
    out: dict[str, tuple[int, ...]] = {}
    for t in traces:
        for pg in t.pg_config:
            if pg.ranks is not None:  # (a group whose dump does not say: gloo's placeholder)
                out.setdefault(str(pg.name), tuple(pg.ranks))
    return out


def world_size(traces: list[RankTrace]) -> int | None:
    groups = layout(traces)
    return len(groups[""]) if "" in groups else len(groups["0"]) if "0" in groups else None


def _descs(traces: list[RankTrace]) -> dict[str, str]:
    return {name: g.pg_desc for t in traces for name, g in t.groups.items() if g.pg_desc}


def _span(traces: list[RankTrace]) -> tuple[int, int] | None:
    firsts = [t.first_created_ns for t in traces if t.first_created_ns]
    lasts = [t.last_event_ns or t.last_created_ns or 0 for t in traces if t.last_event_ns or t.last_created_ns]
    return (min(firsts), max(lasts)) if firsts and lasts else None


def conflict(job: list[RankTrace], other: list[RankTrace], twice: bool = True) -> str | None:
    """Why `other` cannot be ranks of the same job as `job`, or None where nothing says so. `twice`:
    a rank both hold with other records is such a reason (else only the rest is looked at)."""
    mine = {t.rank: t for t in job}
    if twice:
        dup = sorted(t.rank for t in other
                     if t.rank in mine and not _twin(mine[t.rank], t) and not other_recorder(mine[t.rank], t))
        if dup:
            return f"rank {dup[0]} twice"
    a, b = layout(job), layout(other)
    for name in a.keys() & b.keys():
        if a[name] != b[name]:
            return f"group {name or 'default'} has ranks {list(a[name])} in one and {list(b[name])} in the other"
    for ws, ranks in ((world_size(job), {t.rank for t in other}), (world_size(other), set(mine))):
        if ws is not None and ranks and max(ranks) >= ws:
            return f"rank {max(ranks)} beyond a world of {ws}"
    da, db = _descs(job), _descs(other)
    for name in da.keys() & db.keys():
        if da[name] != db[name]:
            return f"group {name} is {da[name]} in one and {db[name]} in the other"
    sa, sb = _span(job), _span(other)
    if sa and sb and (sa[1] < sb[0] or sb[1] < sa[0]):
        return "recorded at different times"
    return None


def _twin(a: RankTrace, b: RankTrace) -> bool:
    """The same dump in another format (a pickle and its JSON twin): the same records, not merely the
    same first one (a planted copy can give its first entry the real one's time)."""
    return (a.first_created_ns is not None and a.first_created_ns == b.first_created_ns
            and a.last_created_ns == b.last_created_ns and a.n_entries == b.n_entries
            and {n: (g.seq.tobytes(), g.flags.tobytes()) for n, g in a.groups.items()}
            == {n: (g.seq.tobytes(), g.flags.tobytes()) for n, g in b.groups.items()})


def split(sources: list[Source]) -> list[Job]:
    """Sources grouped into jobs; raises Ambiguous where a source fits two. The largest sources are
    placed first, so that a job is what most of its ranks say, whatever the order of the arguments: a
    source that sorts first cannot make the job's own ranks look like another job. A source whose only
    disagreement with a job is ranks both hold, with other records, is not another job: those ranks
    are claimed twice, the larger source's copy is kept and the other reported (Job.claimed_twice)."""
    jobs: list[Job] = []
    placed: list[tuple[int, Job]] = []
    for order, src in sorted(enumerate(sources), key=lambda p: (-len(p[1].traces), p[0])):
        if not src.traces:  # nothing readable: a job of its own, whose report says so
            job = _new(jobs)
            job.sources.append(src)
            placed.append((order, job))
            continue
        fits = [j for j in jobs if j.traces and conflict(j.traces, src.traces) is None]
        claimed = [] if fits else [j for j in jobs if j.traces and conflict(j.traces, src.traces, twice=False) is None]
        if len(fits) > 1 or len(claimed) > 1:
            raise Ambiguous(f"cannot tell which job {src.label} belongs to: it fits "
                            + " and ".join(describe(j) for j in fits or claimed)
                            + "; analyse each job's dumps on their own")
        job = (fits or claimed)[0] if fits or claimed else _new(jobs)
        have = {t.rank: (s, i) for s in job.sources for i, t in enumerate(s.traces)}
        kept = []
        for t in src.traces:
            if t.rank not in have:
                kept.append(t)
                continue
            s, i = have[t.rank]
            if other_recorder(s.traces[i], t):  # the rank's other recorder: one trace of both
                s.traces[i] = merge_traces(s.traces[i], t)
            elif not _twin(s.traces[i], t):
                job.claimed_twice.append((s.traces[i], t))
            # else a twin: the first copy stays
        src.traces = kept
        job.sources.append(src)
        placed.append((order, job))
    for job in jobs:  # each job's sources in the order given
        job.sources.sort(key=lambda s: s.key)
    first = {id(j): min(o for o, pj in placed if pj is j) for j in jobs}
    return sorted(jobs, key=lambda j: first[id(j)])


def _new(jobs: list[Job]) -> Job:
    jobs.append(Job())
    return jobs[-1]


def describe(job: Job) -> str:
    """'dirA, dirB (ranks 0-7, world 8, groups 0, 1 (tp))': what a message names a job by."""
    traces = job.traces
    names = sorted({(n, g.pg_desc) for t in traces for n, g in t.groups.items()})
    groups = ", ".join(f"{n} ({d})" if d else n for n, d in names) or "none recorded"
    ws = world_size(traces)
    world = f", world {ws}" if ws else ""
    return (f"{', '.join(s.label for s in job.sources)} (ranks {format_ranks(job.ranks) or 'none'}{world}, "
            f"groups {groups})")
