"""What the evidence stage hands the writer: a `Bundle`, and the writer as the stage sees it.

The stage never imports an exporter: `BundleWriter` is the writer's shape (export/evidence.py's
EvidenceWriter), wired in by cli. A bundle is written in two steps because its report is the
analysis of the bundle's own files (their times are a clock, its pickles carry frames): `begin`
writes the data into a hidden directory, the stage analyses it, `finish` adds the report and
makes the bundle visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from frexport.model.dump import RankDump


@dataclass
class Bundle:
    reason: str
    report_text: str  # the live diagnosis: the report when no other is made, or it fails
    report_json: dict
    dumps: dict[int, RankDump]
    raw_pickles: dict[int, bytes]  # rank -> PyTorch's own pickle (with frames), when fetched
    stacks: dict[int, dict[str, str]]  # rank -> {"traceback": text, "pyspy_dump": text}
    stall_after_s: float = 30.0  # the live analysis' threshold when the incident was seen
    # bundle-relative path ("profiles/rank_<r>.pt.trace.json.gz", "profiles/profiles.json") -> bytes
    profiles: dict[str, bytes] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)  # rank -> the last lines it printed (decode/rank_logs.py)


@dataclass
class Draft:
    """A bundle whose data files are written, in `path` (hidden until `finish`), before its report."""

    bundle: Bundle
    path: str
    stamp: str
    name: str
    reserve: int  # bytes kept for the report
    files: list[str] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)
    omitted: list[int] = field(default_factory=list)  # ranks whose raw data was over max_bytes


class BundleWriter(Protocol):
    written: int
    failed: int

    def begin(self, bundle: Bundle) -> Draft | None:
        """The bundle's data written to a hidden directory; None (said in the log) if that failed."""

    def finish(self, draft: Draft, text: str, report: dict) -> str | None:
        """The report added and the bundle made visible: its path, or None if that failed."""

    def write(self, bundle: Bundle) -> str | None:
        """`begin` and `finish` with the bundle's own report."""
