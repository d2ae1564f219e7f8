"""Profiles on stragglers: a short PyTorch profiler trace of a late rank and of one peer, taken at once.

A straggler finding says who is late and by how much; the two traces say where the time goes. On a
new straggler finding (and on request: `frexport profile`), the ranks are asked for
`frexport_profile?duration_s=D` (the agent, agent/profile.py) or, where only PyTorch's server runs,
torch 2.15's `torch_profile?duration=D` (which, started off the main thread, records little of the
training thread: said in the bundle). Bounds: at most one profile per rank per `interval_s` here,
and again in the agent; `duration_s` at most 30 s; answers read to sources/handlers.FETCH_MAX_PROFILE.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import Metric

from frexport.analysis import findings as F
from frexport.evidence.bundle import Bundle, BundleWriter
from frexport.evidence.report import Reporter, report_of
from frexport.evidence.sink import IncidentSink
from frexport.live.sink import Pass
from frexport.sources.handlers import PROFILE_HANDLER, TORCH_PROFILE_HANDLER, HandlerFetcher
from frexport.sources.http_client import PeerError

PREPARE_S = 30.0  # on top of the duration: the profiler's set-up in the rank (seconds on a loaded machine)
PROFILES_META = "profiles/profiles.json"


def handler_for(listed: frozenset[str], duration_s: float) -> str | None:
    """The request that profiles a rank whose server lists `listed`; None where none can."""
    if PROFILE_HANDLER in listed or not listed:
        return f"{PROFILE_HANDLER}?duration_s={duration_s:g}"
    if TORCH_PROFILE_HANDLER in listed:
        return f"{TORCH_PROFILE_HANDLER}?duration={duration_s:g}"
    return None


def take(fetcher: HandlerFetcher[Any], ranks: list[int], duration_s: float) -> dict[int, tuple[str, bytes | str]]:
    """rank -> (handler asked, its trace or why there is none); every rank profiled at the same time."""
    targets = {t.rank: t for t in fetcher.targets()}
    out: dict[int, tuple[str, bytes | str]] = {}
    wanted = []
    for r in ranks:
        if r not in targets:
            out[r] = ("", "no worker server of this rank is watched here")
            continue
        h = handler_for(fetcher.handlers(r), duration_s)
        if h is None:
            out[r] = ("", "its worker server has neither frexport_profile (the agent) nor torch_profile")
            continue
        wanted.append((targets[r], h))
    for (rank, handler), body in fetcher.fetch_all(wanted, duration_s + PREPARE_S).items():
        out[rank] = (handler.split("?", 1)[0],
                     body if isinstance(body, bytes) else f"{body.reason}: {getattr(body, 'detail', body)}"
                     if isinstance(body, PeerError) else str(body))
    return out


def profile_meta(slow: int | None, peer: int | None, duration_s: float,
                 got: dict[int, tuple[str, bytes | str]]) -> dict:
    """What profiles/profiles.json says: who is compared with whom, how each trace was taken or why not."""
    return {"slow_rank": slow, "peer_rank": peer, "duration_s": duration_s,
            "ranks": {str(r): {"handler": h, "file": profile_file(r, h) if isinstance(b, bytes) else None,
                               "error": None if isinstance(b, bytes) else b} for r, (h, b) in sorted(got.items())}}


def profile_file(rank: int, handler: str) -> str:
    # the agent's answer is gzip'd, torch_profile's plain JSON: Perfetto opens both
    return f"profiles/rank_{rank}.pt.trace.json" + (".gz" if handler == PROFILE_HANDLER else "")


def pick_peer(finding: F.Finding, stragglers: set[int], targets: set[int]) -> int | None:
    """The peer the straggler is compared with: one it holds back, not late itself, watched here."""
    return next((r for r in finding.blocked_ranks if r not in stragglers and r in targets), None)


class ProfileSink(IncidentSink):
    """Takes a pass with a straggler not profiled within `interval_s`; its thread profiles it and a peer
    and writes a bundle (`<time>-straggler-profile`) with both traces and the report comparing them."""

    name = "profiles"
    thread_name = "frexport-profiles"

    def __init__(self, writer: BundleWriter, fetcher: HandlerFetcher[Any], duration_s: float = 5.0,
                 interval_s: float = 600.0, reporter: Reporter | None = None,
                 after_write: Callable[[str], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(writer, after_write)
        self.fetcher = fetcher
        self.duration_s = duration_s
        self.interval_s = interval_s
        self.reporter = reporter
        self.clock = clock
        self._last: dict[int, float] = {}  # rank -> when its last profile was asked (this sink's clock)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # its bundles are the evidence writer's: counted by the evidence sink

    def collect(self) -> Iterator[Metric]:
        return iter(())

    def _due(self, rank: int) -> bool:
        last = self._last.get(rank)
        return last is None or self.clock() - last >= self.interval_s

    def _straggler(self, p: Pass) -> F.Finding | None:
        if p.result is None:
            return None
        late = [f for f in p.result.diagnosis.findings if f.kind == F.STRAGGLER and f.culprit_ranks]
        return next((f for f in late if self._due(f.culprit_ranks[0])), None)

    def wants(self, p: Pass) -> bool:
        return self._straggler(p) is not None

    def write_incident(self, p: Pass) -> str | None:
        finding = self._straggler(p)
        if finding is None or p.result is None:
            return None
        slow = finding.culprit_ranks[0]
        stragglers = {f.culprit_ranks[0] for f in p.result.diagnosis.findings
                      if f.kind == F.STRAGGLER and f.culprit_ranks}
        peer = pick_peer(finding, stragglers, {t.rank for t in self.fetcher.targets()})
        ranks = [slow] + ([peer] if peer is not None else [])
        now = self.clock()
        for r in ranks:  # asked counts, answered or not: a rank that fails is not asked again at once
            self._last[r] = now
        got = take(self.fetcher, ranks, self.duration_s)
        profiles = {profile_file(r, h): b for r, (h, b) in got.items() if isinstance(b, bytes)}
        profiles[PROFILES_META] = json.dumps(profile_meta(slow, peer, self.duration_s, got), indent=2).encode()
        diagnosis = p.result.diagnosis
        from frexport.analysis.report import render_text

        bundle = Bundle("straggler-profile", render_text(diagnosis), diagnosis.to_json(), p.dumps, {}, {},
                        p.result.stall_after_s, profiles=profiles)
        draft = self.writer.begin(bundle)
        if draft is None:
            return None
        return self.writer.finish(draft, *report_of(self.reporter, draft.path, bundle))
