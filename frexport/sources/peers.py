"""The job-level view's source: every peer sidecar's live window (docs/multi-node.md).

Peers are `peers.urls`, or every address the headless Service name `peers.service` resolves to (one
A/AAAA record per ready pod), re-resolved every `discovery_interval`. Each poll GETs a peer's
/api/v1/ranks with a cursor per rank (the oldest entry still unfinished here, else the newest + 1, in
the epoch the peer gave), so a pass moves only what is new or may still change; this source keeps
each rank's window (the newest `window` entries and every older unfinished one) and returns a
snapshot of every rank whose peer answered, seen at the peer's own poll time. Peers are asked
concurrently; one that fails is backed off and reported in the health registry (`peer:<url>`), the
others go on. For evidence it fetches ranks' pickles and stacks through their sidecars (the
`Fetcher` protocol of export/evidence.py) and decodes pickles in the sandboxed decoders.

A peer is trusted only for the ranks it owns (issue 28): what it sends is held by (peer, rank); a rank
is owned by the first peer that claimed it alone, for as long as that peer keeps sending it, and only
the owner's snapshots reach the analysis. Another peer claiming an owned rank, or two peers claiming a
new rank in the same pass, is a collision: logged, counted (`frexport_peer_rank_collisions`), named in
the job bundle, never merged; a rank two peers claim at once with no owner is used from neither (we
cannot tell which is true). Before any rank is held, each peer gets a fair share of `max_ranks`
(max-min: every peer gets what it sends up to an equal share; what the others leave is shared among
those that want more), so one peer sending 4096 fake ranks cannot crowd out the real ranks of others.
A rank a peer stops sending is forgotten, here and in the view's state.
"""

from __future__ import annotations

import base64
import socket
import ssl
import time
from bisect import bisect_left
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from operator import attrgetter
from typing import NamedTuple
from urllib.parse import urlsplit

from frexport import logs
from frexport.config import Peers
from frexport.decode.errors import DecodeError
from frexport.decode.peer_rows import MAX_INTERNED, Dropped, PeerRank, Runs, parse_body
from frexport.decode.read import decode_bytes
from frexport.decode.sandbox import DecoderPool
from frexport.model.dump import Entry, ProcessGroupConfig, RankDump
from frexport.model.outcome import first_unsettled
from frexport.model.peer_rows import expand_runs
from frexport.model.rank_trace import leading_same
from frexport.model.untrack import untrack_plain
from frexport.model.window_rows import merged_window
from frexport.model.world import is_world_size
from frexport.sources.base import Snapshot
from frexport.sources.handlers import Fetched, fetch_cap
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import PeerError, Target, fetch_within, request
from frexport.sources.peer_owners import Owners, fair_shares

PASS_WAIT_S = 2.0  # what one pass waits for its peers; slower ones are taken at a later pass


@dataclass(frozen=True)
class PeerTarget:
    """A rank as the evidence fetcher sees it: which sidecar serves it."""

    rank: int
    peer: str  # base URL


@dataclass
class _Held:
    """One remote rank as this source holds it."""

    peer: str
    epoch: int
    entries: tuple[Entry, ...] = ()  # in record order: the last snapshot's own tuple (one window held, not two)
    cursor: int = -1  # the next poll's: the oldest entry unfinished here, else the newest + 1; -1: none yet
    pg_config: tuple = ()
    handlers: frozenset[str] = frozenset()
    dump: RankDump | None = None


@dataclass
class _PeerState:
    failures: int = 0
    next_try: float = 0.0
    bytes_last: int = 0
    claimed: int = 0  # ranks it sent at its last answer: its demand in the fair share
    over_share: int = 0  # of those, not taken at its last answer
    over_cap: int = 0  # ranks past max_ranks in its last body: not even read
    said: set[str] = field(default_factory=set)  # what was logged about it: said once, not every pass
    suspected: bool = False  # its last answer: its sidecar suspects a stall among its ranks
    world: int | None = None  # the job's world size its ranks report (the agent declares it; NCCL lists it)


class PeersSource:
    name = "peers"

    def __init__(self, health: HealthRegistry, cfg: Peers, window: int, decoder: DecoderPool | None = None,
                 resolve=socket.getaddrinfo, max_ranks: int = 4096, world_size: int | None = None) -> None:
        self.health = health
        self.cfg = cfg
        self.window = window
        self.decoder = decoder
        self.resolve = resolve
        self.bytes_total = 0  # body bytes received, for the benchmark and self-metrics
        self._peers: dict[str, _PeerState] = {}
        self._resolved: list[str] = []
        self._next_resolve = 0.0
        self._next_poll = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._tls = _tls_context(cfg)
        self._headers = _auth_headers(cfg)
        self._interned: dict = {}  # sizes and dtypes seen in bodies (decode/peer_rows.py)
        self._held_by_peer: dict[str, list[tuple[int, _Held]]] = {}
        self._inflight: dict[str, Future] = {}  # peer -> its poll still running (taken when done)
        self._current: frozenset[str] = frozenset()  # the peers of the last pass
        self.pass_wait_s: float | None = PASS_WAIT_S  # None: wait for every peer (benchmarks/bench_jobview.py)
        self.max_ranks = max_ranks  # the configured bound; the view takes the job's world where that is larger
        self.world_size = world_size  # the job's, as configured (the chart's worldSize, the flag)
        self.capacity = max_ranks  # ranks the view holds at most: max_ranks, or the job's world (capacity())
        self._cut: tuple[int, int] = (0, 0)  # (ranks taken, ranks the peers sent) at the last pass that cut
        self._said_cut: tuple[int, int] = (0, 0)
        self._held: dict[tuple[str, int], _Held] = {}  # every owned rank, by (peer, rank)
        self.owners = Owners()  # which peer is believed for each rank (sources/peer_owners.py)
        self._forgotten: list[int] = []  # ranks the view's state must drop (drain_forgotten)
        self.rows_dropped_total = 0  # peer rows out of the field rules
        self.ranks_dropped_total = 0  # malformed ranks, rank ids no job has, ranks over a peer's share

    # --- the Source protocol -------------------------------------------------------------------

    def start(self) -> None:
        pass

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def peers(self) -> list[str]:
        """The peer sidecars' base URLs: configured, plus the Service's addresses (cached)."""
        if self.cfg.service and time.monotonic() >= self._next_resolve:
            self._next_resolve = time.monotonic() + self.cfg.discovery_interval
            host, _, port = self.cfg.service.rpartition(":")
            try:
                infos = self.resolve(host, int(port), type=socket.SOCK_STREAM)
                addrs = sorted({i[4][0] for i in infos})
                self._resolved = [f"{self.cfg.scheme}://{'[' + a + ']' if ':' in a else a}:{port}" for a in addrs]
            except OSError as exc:  # keep the last answer: DNS hiccups must not empty the job
                logs.get().warning("cannot resolve peers.service %s: %s", self.cfg.service, exc)
        return sorted(set(self.cfg.urls) | set(self._resolved))

    def collect(self) -> list[Snapshot]:
        """Snapshots from the answers that arrived: a pass waits at most PASS_WAIT_S for its peers, and a
        peer slower than that (up to its own timeout) is taken at a later call, never holding up the
        others' (issue 28: one slow or huge peer delayed every pass of the view)."""
        now = time.monotonic()
        if now < self._next_poll:
            return self._harvest()
        self._next_poll = now + self.cfg.poll_interval
        peers = self.peers()
        # (a set: 16384 held ranks tested against a list of 2048 peers were quadratic, ~0.15 s of the view's pass)
        current = self._current = frozenset(peers)
        for gone in [p for p in self._peers if p not in current]:
            del self._peers[gone]
            self.owners.claims.pop(gone, None)
            self._inflight.pop(gone, None)  # its answer, if it comes, is not taken
            self.health.forget(f"peer:{gone}")
        for key in [k for k in self._held if k[0] not in current]:
            self._drop(*key)
        due = [p for p in peers if self._peers.setdefault(p, _PeerState()).next_try <= now and p not in self._inflight]
        if not due:
            return self._harvest()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(1, self.cfg.concurrency), thread_name_prefix="frexport-peers")
        self._index_held()
        for p in due:
            self._inflight[p] = self._pool.submit(self._poll_peer, p)
        wait([self._inflight[p] for p in due], timeout=self.pass_wait_s)  # one still slow from before: not waited for
        return self._harvest()

    def _harvest(self) -> list[Snapshot]:
        done = [p for p, f in self._inflight.items() if f.done()]
        if not done:
            return []
        answers = []
        for p in sorted(done):
            try:
                a = self._inflight.pop(p).result()  # peer and decode failures are recorded in _poll_peer
            except Exception:  # noqa: BLE001 - a bug with one peer's answer must not lose the others'
                logs.get().exception("peer %s: its answer could not be taken", p)
                continue
            if a is not None and p in self._peers:
                answers.append(a)
        return self._take(answers, self._current) if answers else []

    @property
    def collisions(self) -> dict[int, tuple[str | None, tuple[str, ...]]]:
        return self.owners.collisions

    @property
    def collisions_total(self) -> int:
        return self.owners.collisions_total

    def over_share(self) -> dict[str, int]:
        return {p: st.over_share for p, st in list(self._peers.items()) if st.over_share}

    def drain_forgotten(self) -> list[int]:
        """Ranks whose owner let go of them since the last call: the view's state drops them (bounded
        memory). Also when another peer owns one now: the old owner's snapshot (perhaps dated ahead)
        must not make the new owner's look older and be refused."""
        out, self._forgotten = list(dict.fromkeys(self._forgotten)), []
        return out

    # --- ownership and shares ------------------------------------------------------------------

    def stall_suspected(self) -> bool:
        """Whether a peer's sidecar suspects a stall among its ranks (its last answer says so): the
        view then analyses often, as the pod does."""
        return any(st.suspected for p, st in self._peers.items() if p in self._current)

    def _index_held(self) -> None:
        """Each peer's ranks, found once per pass (not one scan of every rank per peer: 512 x 4096)."""
        self._held_by_peer = {}
        for (peer, r), h in sorted(self._held.items()):
            self._held_by_peer.setdefault(peer, []).append((r, h))

    def _ranks_path(self, peer: str) -> str:
        """The request for a peer's ranks: from the cursor of each rank held, only what came after."""
        cursors = ",".join(f"{r}:{h.epoch}:{h.cursor}:{len(h.pg_config)}" for r, h in self._held_by_peer.get(peer, ())
                           if h.entries)
        return "/api/v1/ranks?members=runs&rows=kinds" + (f"&since={cursors}" if cursors else "")

    def _take(self, answers: list[_Answer], peers: frozenset[str]) -> list[Snapshot]:
        """Answers of this pass -> snapshots of the ranks each peer owns, within its share."""
        ranks: list[PeerRank] | dict[int, PeerRank]  # (for mypy) a peer's answer, then what was kept of it
        r: int | PeerRank  # a rank it stopped sending, then each rank kept
        for peer, ranks, _ in answers:
            st = self._peers[peer]
            st.claimed = len(ranks)
            st.world = max((x.world_size for x in ranks if x.world_size is not None and is_world_size(x.world_size)),
                           default=None)
        self.capacity = self._capacity(peers)
        share = fair_shares({p: st.claimed for p, st in self._peers.items() if p in peers}, self.capacity)
        kept: dict[str, dict[int, PeerRank]] = {}
        sent = taken = 0
        for peer, ranks, _ in answers:
            mine = {r for r, _ in self._held_by_peer.get(peer, ())}  # what it holds goes first: stable shares
            order = sorted(ranks, key=lambda x: (x.rank not in mine, x.rank))
            kept[peer] = {x.rank: x for x in order[:share.get(peer, 0)]}
            st = self._peers[peer]
            st.over_share = len(ranks) - len(kept[peer]) + st.over_cap
            sent, taken = sent + len(ranks) + st.over_cap, taken + len(kept[peer])
            if st.over_share:
                self.ranks_dropped_total += len(ranks) - len(kept[peer])
            self.owners.claims[peer] = frozenset(kept[peer])
            for r in [r for r in mine if r not in kept[peer]]:  # it stopped sending it: forgotten
                self._drop(peer, r)
        self._say_cut(taken, sent, sum(1 for p, _, _ in answers if self._peers[p].over_share), len(peers))
        for peer, rank in self.owners.settle():  # owners that stopped claiming (their peer left, or failed)
            self._drop(peer, rank, released=True)
        out: list[Snapshot] = []
        windows = {peer: w for peer, _, w in answers}
        for peer, ranks in kept.items():
            for r in ranks.values():
                if self.owners.owner.get(r.rank) == peer and \
                        (s := self._merge(peer, r, windows[peer].get(r.rank))) is not None:
                    out.append(s)
        return out

    def _capacity(self, peers: frozenset[str]) -> int:
        """The ranks the view holds: max_ranks, or the job's world where larger (configured, else the world
        size most peers report: one peer cannot size the view, and a 16384-rank job is not cut to a
        quarter by the default of 4096)."""
        world = self.world_size
        if world is None:
            reported = Counter(st.world for p, st in self._peers.items() if p in peers and st.world)
            world = min(reported, key=lambda w: (-reported[w], w)) if reported else None
        return max(self.max_ranks, world or 0)

    def _say_cut(self, taken: int, sent: int, over: int, peers: int) -> None:
        """One line a pass that cuts (and only when the cut changed), never one a peer: 2048 lines a pass
        said the same thing."""
        self._cut = (taken, sent) if taken < sent else (0, 0)
        if self._cut != self._said_cut and taken < sent:
            logs.get().warning("job view: took %d of the %d ranks %d peers sent (room for %d: max_ranks %d, the "
                               "job's world %s; %d peers sent more than their fair share); findings and bundles "
                               "rest on the ranks taken: raise max_ranks or give the world size", taken, sent, peers,
                               self.capacity, self.max_ranks, self.world_size or "as most peers report it", over)
        self._said_cut = self._cut

    @property
    def cut(self) -> tuple[int, int]:
        return self._cut

    def _drop(self, peer: str, rank: int, released: bool = False) -> None:
        self._held.pop((peer, rank), None)
        if released or self.owners.release(peer, rank):
            self._forgotten.append(rank)

    def _say(self, peer: str, problem: str) -> None:
        st = self._peers[peer]
        if problem not in st.said:
            if len(st.said) >= 64:  # bounded: a peer varying its faults is still heard, at most 64 lines a round
                st.said.clear()
            st.said.add(problem)
            logs.get().warning("%s", problem)

    # --- one peer ------------------------------------------------------------------------------

    def _poll_peer(self, peer: str) -> _Answer | None:
        st = self._peers[peer]
        start, now_ns = time.monotonic(), time.time_ns()
        try:
            body = self._get(peer, self._ranks_path(peer))
            ranks, dropped, suspected = self._parse(body, peer)
            windows = self._windows(peer, ranks)
        except (PeerError, DecodeError) as exc:
            st.failures += 1
            st.next_try = time.monotonic() + min(60.0, 0.5 * 2 ** min(st.failures, 16))
            reason = exc.reason if isinstance(exc, PeerError) else "decode_" + exc.reason
            self.health.record(f"peer:{peer}", False, time.monotonic() - start, now_ns, reason, exc.detail)
            return None
        st.failures, st.next_try, st.bytes_last, st.over_cap = 0, 0.0, len(body), dropped.over_cap
        st.suspected = suspected
        self.bytes_total += len(body)
        self.rows_dropped_total += dropped.rows
        self.ranks_dropped_total += dropped.ranks + dropped.over_cap
        if dropped.ranks or dropped.rows:  # over the cap is said with the share
            self._say(peer, f"peer {peer}: dropped {dropped.ranks} ranks and {dropped.rows} rows "
                            f"out of the field rules or bounds, e.g. {dropped.reason}")
        self.health.record(f"peer:{peer}", True, time.monotonic() - start, now_ns)
        return peer, ranks, windows

    def _windows(self, peer: str, ranks: list[PeerRank]) -> dict[int, _Window]:
        """Each rank's window as it would be merged now, worked out on the poll's thread while the other
        peers are still decoded: the view's thread only takes it (it merged every rank after the last
        answer was in, the other core idle: 0.10-0.11 s of a 4096-rank steady pass). Read-only: the
        held state is the view thread's, which takes a window only if what it was worked from is still
        what is held (`_merge`)."""
        out = {}
        for r in ranks:
            out[r.rank] = _window(self._held_for(peer, r) or _Held(peer, r.epoch), r, self.window)
        return out

    def _held_for(self, peer: str, r: PeerRank) -> _Held | None:
        """What a rank's answer is merged into; None where it starts afresh (nothing held yet, a new epoch,
        or the whole window sent)."""
        held = self._held.get((peer, r.rank))
        return None if held is None or held.epoch != r.epoch or r.full else held

    def _parse(self, body: bytes, peer: str) -> tuple[list[PeerRank], Dropped, bool]:
        """A peer's body read in the sandboxed decoders (raises DecodeError): bounded in memory like
        every untrusted input, and in a 512-pod job the reading runs on the decoders' cores while
        this process merges what came before. In this process where there are no decoders. At most
        `max_ranks` ranks of one body are read at all."""
        if self.decoder is None:
            _now, ranks, dropped, suspected = parse_body(body, peer, self._interned, self.capacity)
            return ranks, dropped, suspected
        out = self.decoder.run(_BodyJob(body, peer, self.capacity))
        if isinstance(out, DecodeError):
            raise out
        return out

    def _merge(self, peer: str, r: PeerRank, window: _Window | None = None) -> Snapshot | None:
        held = self._held_for(peer, r)
        if held is None:
            held = self._held[(peer, r.rank)] = _Held(peer, r.epoch)
        if r.pg_config is not None:  # member tuples shared across ranks and bodies (analysis/membership.py)
            if len(self._interned) > MAX_INTERNED:  # a peer sending ever new groups must not grow it for good
                self._interned.clear()
            held.pg_config = tuple(self._members(c, runs)
                                   for c, runs in zip(r.pg_config, r.pg_runs or repeat(None)))
        held.handlers = r.handlers
        if window is None or window.held is not held.entries or window.cursor != held.cursor:
            window = _window(held, r, self.window)
        held.entries, held.cursor = window.entries, window.next_cursor
        entries = held.entries
        if held.dump is not None and not r.entries and r.dumped_at_ns == held.dump.dumped_at_ns:
            return None  # the peer has not polled the rank since: nothing new to say
        # an idle or hung rank's window is the same tuple pass after pass (the same entry objects, as
        # window_rows.merged_window keeps them): a new tuple made the view follow every rank's trace again (~150 µs
        # a rank a pass, for nothing new)
        last = held.dump.entries if held.dump is not None else ()
        if len(last) == len(entries) and leading_same(entries, last, 0) == len(entries):
            held.entries = last
        held.dump = RankDump(r.rank, f"peer:{peer}", "json", _version(r.version), r.version, r.comm_lib_version,
                             held.pg_config, r.pg_status, held.entries, dumped_at_ns=r.dumped_at_ns,
                             declared_world_size=r.world_size)
        # seen at the peer's clock, but never in our future: a date far ahead would keep the rank in the
        # view's state for good and make every later true snapshot look older
        now = time.time_ns()
        seen = r.dumped_at_ns if r.dumped_at_ns and r.dumped_at_ns <= now + 300_000_000_000 else now
        return Snapshot(held.dump, f"peer:{peer}", seen)

    def _members(self, c: ProcessGroupConfig, runs: Runs | None) -> ProcessGroupConfig:
        """A group with its member tuple shared across ranks and bodies: a list sent as runs is expanded
        once, found again by its runs (hashing a 16384-member tuple for each of 16384 ranks cost more)."""
        if runs is not None:
            members = self._interned.get(("runs", runs))
            if members is None:
                members = self._interned[("runs", runs)] = expand_runs(runs)
            return c._replace(ranks=members)
        if c.ranks is None:
            return c
        return c._replace(ranks=self._interned.setdefault(("members", c.ranks), c.ranks))

    def _get(self, peer: str, path: str, timeout: float | None = None, max_body: int | None = None) -> bytes:
        parts = urlsplit(peer)
        target = Target(host=parts.hostname or "", port=parts.port or (443 if parts.scheme == "https" else 80))
        resp = request(target, "GET", path, timeout=timeout or self.cfg.timeout,
                       max_body=min(max_body or self.cfg.max_body_bytes, self.cfg.max_body_bytes),
                       tls=self._tls if parts.scheme == "https" else None, headers=self._headers,
                       server_name=self.cfg.server_name)
        if resp.status != 200:
            raise PeerError("http_status", f"{peer}{path.split('?')[0]} answered {resp.status}: "
                            f"{resp.body[:200].decode(errors='replace').strip()}")
        return resp.body

    # --- evidence (sources/handlers.PickleFetcher) ----------------------------------------------------

    def targets(self) -> list[PeerTarget]:
        return [PeerTarget(r, p) for r, p in sorted(self.owners.owner.items())]

    def handlers(self, rank: int) -> frozenset[str]:
        held = self._held.get((self.owners.owner.get(rank, ""), rank))
        return held.handlers if held is not None else frozenset()

    def fetch_all(self, wanted: list[tuple[PeerTarget, str]], deadline_s: float) -> Fetched:
        """Handlers of ranks in other pods, through their sidecars, all within one deadline."""
        return fetch_within(wanted, deadline_s, self.cfg.concurrency, self._fetch_one, "frexport-peer-fetch")

    def _fetch_one(self, t: PeerTarget, handler: str, timeout_s: float) -> bytes:
        # evidence bodies are capped by kind (handlers.fetch_cap): a peer calling its own rank a culprit
        # cannot push hundreds of MB into the view's memory or the job's bundle
        return self._get(t.peer, f"/api/v1/ranks/{t.rank}/handler/{handler}", timeout_s, max_body=fetch_cap(handler))

    def decode_pickles(self, raw: dict[int, bytes]) -> dict[int, RankDump]:
        """Ranks' pickles (with frames: call sites) decoded in the sandboxed decoders; failures left out."""
        out = {}
        for rank, body in raw.items():
            job = _PickleJob(body, f"peer rank {rank}", rank)
            dump = self.decoder.run(job) if self.decoder is not None else DecodeError(job.path, "no_decoder", "")
            if isinstance(dump, DecodeError):
                logs.get().warning("rank %d's pickle from its sidecar is unreadable: %s", rank, dump.detail)
                continue
            out[rank] = dump
        return out


@dataclass(frozen=True)
class _BodyJob:
    body: bytes
    path: str
    max_ranks: int

    def __call__(self) -> tuple[list[PeerRank], Dropped, bool]:
        return parse_body(self.body, self.path, None, self.max_ranks)[1:]


@dataclass(frozen=True)
class _PickleJob:
    body: bytes
    path: str
    rank: int

    def __call__(self) -> RankDump:
        return decode_bytes(self.body, self.path, rank=self.rank)


class _Window(NamedTuple):
    """A rank's window merged from what was held (`held`, `cursor`): the new entries and the next cursor."""

    held: tuple[Entry, ...]
    cursor: int
    entries: tuple[Entry, ...]
    next_cursor: int


_Answer = tuple[str, list[PeerRank], dict[int, _Window]]  # a peer, the ranks it sent, their windows merged


def _window(held: _Held, r: PeerRank, window: int) -> _Window:
    """The held window with what the peer sent: the new window and cursor.

    Work per pass in proportion to what moved, not to the window (4096 ranks x 256 entries): the peer
    sends the entries from the cursor on, so only the held ones from the first sent on can change; the
    older ones were finished when the cursor was taken and are kept as they are."""
    entries, cursor = held.entries, held.cursor
    unchanged_below = cursor
    if r.entries:
        entries, lo = merged_window(entries, r.entries)
        unchanged_below = min(unchanged_below, lo)
    if r.first is not None:  # out of the peer's window, unless still unfinished
        q = bisect_left(entries, r.first, key=_record_id)
        if q:
            entries = _unfinished(entries, q) + entries[q:]
    cut = max(0, len(entries) - window)
    if cut:
        # the older unfinished entries stay (where the rank waits is its oldest one), at most a window of
        # them: a peer that keeps sending new unfinished entries for a rank grew the view without bound
        # (85 -> 953 MB in 50 s)
        older = _unfinished(entries, cut)[:window]
        entries = older + entries[cut:]
    if entries:
        # every entry older than the last cursor was finished then and, unless sent again, is the same
        # object now: the oldest unfinished one is at or after both
        start = bisect_left(entries, unchanged_below, key=_record_id) if unchanged_below >= 0 else 0
        i = first_unsettled(entries, start)
        cursor = entries[i].record_id if i is not None else entries[-1].record_id + 1
    if entries is not held.entries:
        # a window of untracked entries is itself out of the collector's lists: the young collection
        # after a pass walked each new one, item by item, cold (~4 million items at 16384 ranks)
        untrack_plain((entries,))
    return _Window(held.entries, held.cursor, entries, cursor)


def _unfinished(entries: tuple[Entry, ...], stop: int) -> tuple[Entry, ...]:
    """The entries before `stop` not yet finished (usually none: the C-level check first, the filter, a
    property call an entry, only where one is not)."""
    if first_unsettled(entries, 0, stop) is None:
        return ()
    return tuple(e for e in entries[:stop] if not e.finished)


_record_id = attrgetter("record_id")


@lru_cache(maxsize=64)  # one tuple per version, not one a rank a pass (each young for the collector to walk)
def _version(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _tls_context(cfg: Peers) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ca_file)
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _auth_headers(cfg: Peers) -> dict[str, str]:
    if not cfg.username or not cfg.password_file:
        return {}
    with open(cfg.password_file) as f:
        password = f.read().strip()
    token = base64.b64encode(f"{cfg.username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
