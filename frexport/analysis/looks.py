"""Two looks decide: the same job's recorders read twice, some seconds apart (`frexport snapshot
--rounds 2`), say per process group whether it is `progressing` (a member recorded a new op or
finished one between the looks) or `hung` (no member moved and some wait in an op).

One look cannot tell a hang from a snapshot of ranks still computing: that is why a post-mortem's
suspects stay suspects. Between two looks the recorder's own content is the evidence (a rank that
moved recorded more), and the time between them is measured by the snapshot on its own monotonic
clock, written to `looks.json` (never read from file times). So a suspect whose group is hung across
two looks at least the stall threshold apart is a certain culprit, and one whose group progressed
is cleared (a hang that began after the first look would take a third look to prove).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace

from frexport.analysis.findings import Diagnosis, format_ranks
from frexport.model.rank_trace import FINISHED, GroupTrace, RankTrace

LOOKS_FILE = "looks.json"
_LOOK = re.compile(r"^look_(\d{1,3})$")
PROGRESSING, HUNG, QUIET = "progressing", "hung", "quiet"


@dataclass(frozen=True)
class GroupProgress:
    pg_name: str
    pg_desc: str
    state: str  # PROGRESSING, HUNG, QUIET (no op pending, none recorded: an unused group)
    moved: tuple[int, ...]  # ranks that recorded or finished an op of the group between the looks
    waiting: tuple[int, ...]  # ranks with an unfinished op of the group at the second look
    silent: tuple[int, ...] = ()  # ranks of the first look that the second did not reach

    @property
    def label(self) -> str:
        return f"{self.pg_name} ({self.pg_desc})" if self.pg_desc else self.pg_name

    def text(self) -> str:
        out = f"group {self.label}: {self.state}"
        if self.moved:
            out += f", ranks {format_ranks(self.moved)} moved"
        elif self.state == HUNG:
            out += ", no rank moved"
        if self.waiting:
            out += f"; ranks {format_ranks(self.waiting)} wait in it"
        if self.silent:
            out += f"; ranks {format_ranks(self.silent)} did not answer the second look"
        return out

    def to_json(self) -> dict:
        return {"process_group": {"name": self.pg_name, "desc": self.pg_desc}, "state": self.state,
                "moved": list(self.moved), "waiting": list(self.waiting), "silent": list(self.silent)}


def look_dirs(path: str) -> list[str]:
    """The look_<n> folders of a two-look snapshot, in order (none: not one)."""
    try:
        names = [(int(m.group(1)), n) for n in os.listdir(path) if (m := _LOOK.match(n))]
    except OSError:
        return []
    return [os.path.join(path, n) for _, n in sorted(names)] if len(names) >= 2 else []


def gap_seconds(path: str) -> float | None:
    """The shortest time between a rank's answers to the last two looks, as the snapshot measured
    it (looks.json); None without that file: then the looks still show who moved, but time nothing."""
    try:
        with open(os.path.join(path, LOOKS_FILE), "rb") as f:
            doc = json.loads(f.read(1 << 20))
        a, b = doc["seen_s"][-2], doc["seen_s"][-1]
        gaps = [float(b[r]) - float(a[r]) for r in b if r in a]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return min(gaps) if gaps else None


def _marks(t: RankTrace) -> dict[str, tuple]:
    """Per group, what changes when the rank moves: ops recorded, the newest, ops finished."""
    out = {}
    for name, g in t.groups.items():
        done = sum(1 for f in g.flags if f & FINISHED) + sum(1 for op in g.p2p if op.flags & FINISHED)
        out[name] = (len(g.seq) + len(g.p2p), g.seq[-1] if len(g.seq) else None, done)
    return out


def progress(first: list[RankTrace], second: list[RankTrace]) -> list[GroupProgress]:
    before = {t.rank: _marks(t) for t in first}
    after = {t.rank: t for t in second}
    groups: dict[str, dict] = {}
    t: RankTrace | None  # (for mypy) each look's trace here, `after`'s lookup below
    g: GroupTrace | None
    for t in list(first) + list(second):
        for name, g in t.groups.items():
            groups.setdefault(name, {"desc": g.pg_desc, "ranks": set()})["ranks"].add(t.rank)
    out = []
    for name, info in sorted(groups.items()):
        moved: list[int] = []
        waiting: list[int] = []
        silent: list[int] = []
        for r in sorted(info["ranks"]):
            t = after.get(r)
            if t is None:
                silent.append(r)
                continue
            g = t.groups.get(name)
            if g is not None and (any(not f & FINISHED for f in g.flags) or any(not op.flags & FINISHED
                                                                               for op in g.p2p)):
                waiting.append(r)
            if before.get(r, {}).get(name) != _marks(t).get(name):
                moved.append(r)
        state = PROGRESSING if moved else HUNG if waiting else QUIET
        out.append(GroupProgress(name, info["desc"], state, tuple(moved), tuple(waiting), tuple(silent)))
    return out


def decide(d: Diagnosis, groups: list[GroupProgress], gap_s: float | None, stall_after_s: float,
           still: frozenset[int] = frozenset()) -> Diagnosis:
    """The second look's diagnosis with its suspects decided by the two looks. `still`: ranks whose
    stack was at the same place in both looks (whereabouts.place): for waits the recorder cannot see
    (gloo's send/recv, no group), ranks that stayed in the same call with nothing recorded moving."""
    by_name = {g.pg_name: g for g in groups}
    findings, notes = [], list(d.notes)
    quiet_job = not any(g.state == PROGRESSING for g in groups)
    long_enough = gap_s is not None and gap_s >= stall_after_s
    for f in d.findings:
        g = by_name.get(f.pg_name)
        if (not f.certain and f.root_cause and not f.pg_name and quiet_job and long_enough
                and f.blocked_ranks and set(f.blocked_ranks) <= still):
            findings.append(replace(f, certain=True, message=f.message.replace(
                ", or ops caught in flight", f" (the same calls in two looks {gap_s:.1f} s apart)"),
                reason=f"{f.reason}; in two looks {gap_s:.1f} s apart every "
                                    f"one of these ranks was in the same call and no recorded op moved: a hang"))
        elif f.certain or not f.root_cause or g is None:
            findings.append(f)
        elif g.state == PROGRESSING:
            notes.append(f"cleared by the second look: {f.message} (group {g.label} moved between the looks: "
                         f"ranks {format_ranks(g.moved)}; a hang that began after the first look would take a "
                         f"third look to prove)")
        elif g.state == HUNG and gap_s is not None and gap_s >= stall_after_s:
            findings.append(replace(f, certain=True, message=f.message.replace(
                ": the suspect if this is a hang", f": hung, no rank of it moved in {gap_s:.1f} s"),
                reason=f"{f.reason}; no rank of group {g.label} moved between two looks {gap_s:.1f} s apart "
                       f"(the snapshot's clock): it is hung"))
        elif g.state == HUNG:
            findings.append(replace(f, reason=f"{f.reason}; no rank of group {g.label} moved between the two "
                                    + (f"looks, but they were {gap_s:.1f} s apart, under the stall threshold"
                                       if gap_s is not None else "looks, whose distance in time is not recorded")))
        else:
            findings.append(f)
    return replace(d, findings=findings, notes=notes, progress=groups, looks_gap_s=gap_s)
