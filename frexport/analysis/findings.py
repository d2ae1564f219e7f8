"""What the analysis concludes: findings and the overall diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field

from frexport.analysis.clock import Waited
from frexport.model.dump import DEFAULT_RECORDER, InputError, split_group_name

# Finding kinds: the `kind` of a Finding, the `kind` label of frexport's metrics, the `frexport.finding`
# attribute of spans. A new kind goes here and into the groups below that it belongs to.
DESYNC = "desync"  # ranks ran different collectives (or the same ones in a different order)
SIZE_MISMATCH = "size_mismatch"
DTYPE_MISMATCH = "dtype_mismatch"
MISSING_RANK = "missing_rank"  # a member never issued the collective its peers wait in
MISSING_DUMP = "missing_dump"  # a rank left no usable dump
NOT_COMPLETED = "not_completed"  # every member joined, it did not finish
TIMEOUT = "timeout"  # the watchdog gave up on it
STRAGGLER = "straggler"
UNMATCHED_P2P = "unmatched_p2p"  # a send or recv whose peer never posted the other side
REMOTE_WAIT = "remote_wait"  # scoped (live) analysis: ranks wait for ranks of other pods; no culprit here

# Kind groups.
# Ranks disagree on what they run, in PyTorch's order of checks: op type, then sizes, then dtypes.
MISMATCH_KINDS = (DESYNC, SIZE_MISMATCH, DTYPE_MISMATCH)
DESYNC_KINDS = frozenset(MISMATCH_KINDS)
# Ranks are stuck: as a root cause, the job stalls (the sidecar's `stalled` status).
STALL_KINDS = frozenset({MISSING_RANK, NOT_COMPLETED, TIMEOUT, MISSING_DUMP, UNMATCHED_P2P})
# The culprits did not show up (never issued the op, left no dump): the rank is absent, not stuck inside.
MISSING_KINDS = frozenset({MISSING_RANK, MISSING_DUMP, UNMATCHED_P2P})

HEALTHY = "healthy"
UNHEALTHY = "unhealthy"
INCONCLUSIVE = "inconclusive"


def format_ranks(ranks) -> str:
    """[0, 1, 2, 5, 6] -> '0-2, 5, 6' (runs of three or more become ranges)."""
    ranks = sorted(set(ranks))
    out: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.extend([f"{ranks[i]}-{ranks[j]}"] if j - i >= 2 else map(str, ranks[i:j + 1]))
        i = j + 1
    return ", ".join(out)


@dataclass(frozen=True)
class Finding:
    kind: str
    pg_name: str
    pg_desc: str
    collective_seq_id: int | None
    culprit_ranks: tuple[int, ...]
    blocked_ranks: tuple[int, ...]
    op: str | None
    call_site: str | None
    message: str
    details: tuple[str, ...] = ()  # further report lines: each side's sizes and dtypes, where ranks wait
    root_cause: bool = False  # explains a hang (other ranks are blocked by it)
    time_ns: int | None = None  # when the collective was issued, for ordering
    reason: str = ""  # the one line of evidence the conclusion rests on
    certain: bool = True  # False: a suspect that only the time ranks waited would confirm (not in the dumps)
    waited: Waited | None = None  # how long the oldest waiting rank waited, and by which clock (clock.py)
    # faults that followed this one and are explained by it (consequence.py): deaths, waits, missing dumps
    consequences: tuple[Finding, ...] = ()
    # (rank, its last error line, when it was printed or None) for culprits whose log tail is at hand
    # (last_words.py): why a rank that left the job went
    last_words: tuple[tuple[int, str, str | None], ...] = ()

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "process_group": {"name": split_group_name(self.pg_name)[0], "desc": self.pg_desc,
                              "backend": split_group_name(self.pg_name)[1] or DEFAULT_RECORDER},
            "collective_seq_id": self.collective_seq_id,
            "culprit_ranks": list(self.culprit_ranks),
            "blocked_ranks": list(self.blocked_ranks),
            "op": self.op,
            "call_site": self.call_site,
            "message": self.message,
            "reason": self.reason,
            "certain": self.certain,
            "waited": self.waited.to_json() if self.waited is not None else None,
        } | ({"consequences": [c.to_json() for c in self.consequences]} if self.consequences else {}) | (
            {"last_error_lines": {str(r): {"line": line, "at": at} for r, line, at in self.last_words}}
            if self.last_words else {})


@dataclass
class Diagnosis:
    ranks: list[int]
    findings: list[Finding]
    input_errors: list[InputError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: int = 0  # collectives that every visible member recorded identically
    groups: int = 0
    waits: list = field(default_factory=list)  # hang.Wait: where each rank waits (the live metrics show them)
    # Findings a report filter (--selected-ranks, --pg-filters) leaves out: still part of the verdict,
    # so a filter can narrow what is shown but never turn an unhealthy job healthy.
    hidden: list[Finding] = field(default_factory=list)
    # two looks (analysis/looks.py): per group whether it progressed or hung between them, and how far
    # apart they were as the snapshot measured it (None: not recorded)
    progress: list = field(default_factory=list)
    looks_gap_s: float | None = None

    @property
    def verdict(self) -> str:
        if not self.ranks:
            return INCONCLUSIVE
        every = self.findings + self.hidden
        if any(f.kind not in (MISSING_DUMP, REMOTE_WAIT) and f.certain for f in every):
            return UNHEALTHY
        if every:
            return INCONCLUSIVE
        return HEALTHY

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "ranks": list(self.ranks),
            "findings": [f.to_json() for f in self.findings],
            "input_errors": [{"file": e.file, "error": e.error} for e in self.input_errors],
        } | ({"outside_filter": len(self.hidden)} if self.hidden else {}) | (
            {"looks": {"gap_s": self.looks_gap_s, "groups": [g.to_json() for g in self.progress]}}
            if self.progress else {})
