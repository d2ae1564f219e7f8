"""What a source answers besides snapshots: a rank's handlers, asked by name (its pickle with stack
frames, its Python stacks), for the evidence stage (frexport/evidence/).

The names are the contract with the ranks (PyTorch's worker server, frexport.agent), so they live
here, with the sources that speak it, once: the evidence stage and the peers endpoint's proxy use
these constants, never their spelling. `HandlerFetcher` is what a source offers for it
(WorkerServerSource for this pod's ranks, PeersSource for other pods' through their sidecars): the
stage is handed one and never reaches into a source for more.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from frexport.model.dump import RankDump
from frexport.sources.http_client import PeerError

# frexport.agent's pickle dump of one recorder, with stack frames (the agent holds the same name: the
# sidecar imports nothing of the agent, tests/unit/agent/test_live.py keeps them equal)
PICKLE_HANDLER = "frexport_fr_pickle"
TRACEBACK_HANDLER = "dump_traceback"  # faulthandler's text of every thread
PYSPY_HANDLER = "pyspy_dump"  # py-spy stops the rank's process while it reads it: asked sparingly
# PyTorch's stack handlers -> the kind of text they answer (a bundle's stacks/rank_<r>.<kind>.txt)
STACK_HANDLERS = {TRACEBACK_HANDLER: "traceback", PYSPY_HANDLER: "pyspy_dump"}

# A short PyTorch profiler trace of a rank's training thread, gzip'd (frexport.agent's, agent/profile.py,
# `?duration_s=`); without the agent, torch 2.15's own `torch_profile` (`?duration=`, plain JSON)
PROFILE_HANDLER = "frexport_profile"
TORCH_PROFILE_HANDLER = "torch_profile"

# What one evidence answer may hold, by kind (a pod's own fetch and the job view's through the peers):
# a rank answering 60 MiB took a pod's sidecar to 1.2 GB for 4 ranks at the poll's 64 MiB body bound
FETCH_MAX_PICKLE = 32 << 20  # a rank's recorder with frames: 2000 entries are 1-3 MB
FETCH_MAX_STACKS = 4 << 20  # stacks, a dump-file answer
FETCH_MAX_PROFILE = 32 << 20  # a profile: the agent caps its gzip'd trace at 16 MiB; torch_profile's is plain JSON


def fetch_cap(handler: str) -> int:
    """The most bytes an evidence answer of `handler` (maybe with its `?backend=`) is read to."""
    name = handler.split("?", 1)[0]
    if name in (PROFILE_HANDLER, TORCH_PROFILE_HANDLER):
        return FETCH_MAX_PROFILE
    return FETCH_MAX_PICKLE if name == PICKLE_HANDLER else FETCH_MAX_STACKS


# torch 2.15: writes a recorder's dump where it dumps on a timeout; its listing also says the
# worker server serves any backend's `fr_trace_json?backend=`
DUMP_FILE_HANDLER = "fr_dump_file"

Fetched = dict[tuple[int, str], bytes | PeerError]  # (rank, handler) -> its body, or why not


class Ranked(Protocol):
    @property
    def rank(self) -> int: ...


T = TypeVar("T", bound=Ranked)


class HandlerFetcher(Protocol[T]):
    """A source's ranks as handlers can be asked of them."""

    def targets(self) -> list[T]:
        """The ranks that can be asked, each as the source reaches it."""

    def handlers(self, rank: int) -> frozenset[str]:
        """The handlers the rank's server listed (empty: unknown)."""

    def fetch_all(self, wanted: list[tuple[T, str]], deadline_s: float) -> Fetched:
        """Every (target, handler) asked at once, all within one deadline; failures as PeerError."""


class PidLookup(Protocol):
    """A source that can say a rank's process id as this process sees it (same pid namespace)."""

    def pid(self, rank: int) -> int | None:
        """The rank's pid, or None where it cannot be known from here."""


class PickleFetcher(HandlerFetcher[T], Protocol[T]):
    """A source whose ranks are in other pods (PeersSource): it also decodes their pickles in its
    sandboxed decoders, and says which ranks two peers claimed (sources/peer_owners.py)."""

    def decode_pickles(self, raw: dict[int, bytes]) -> dict[int, RankDump]:
        """Rank -> its dump with frames; an unreadable body is left out (and logged)."""

    @property
    def collisions(self) -> dict[int, tuple[str | None, tuple[str, ...]]]:
        """Rank -> (the peer whose claim is used, the peers refused)."""

    @property
    def cut(self) -> tuple[int, int]:
        """(ranks taken, ranks the peers sent) at the last pass that took fewer than were sent; (0, 0)
        when none was left out."""
