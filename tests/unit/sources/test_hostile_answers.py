"""The answers of a rank that the sidecar parses in its own process, outside the decoders' sandbox
(issue 38, point 1): the agent's status (`frexport_fr_status`), its recorder list (`frexport_recorders`)
and torch 2.15's `c10d_health_check`. Each is read up to a small bound and no further; past it, or on
any error while handling it (MemoryError included), only that rank's poll fails, said once, counted.

The ranks are fakes (tests/support/peers.py): a real agent never answers 16 MiB of status.
"""

import json
import logging
import time

import pytest

from frexport.config import WorkerServers
from frexport.live.state import LiveState
from frexport.sources import worker_server
from frexport.sources.entry_schedule import EntrySchedule
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.peers import FakeAgentRank, stream_json

MiB = 1 << 20


def _source(tmp_path, health):
    # status first, every collect: the first reads each rank whole, the next ones its status
    return WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=5.0, poll_interval=0.0,
                                                    status_interval=0.0, entries_interval=3600.0,
                                                    suspect_after=3600.0))


def _pump_unbacked(src, state, times):
    """Collect `times` times, each rank due every time (a failed rank is otherwise backed off)."""
    for _ in range(times):
        for b in src._backoff.values():
            b.next_try = 0.0
        pump(src, state)


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until-close"])
@pytest.mark.parametrize("handler", ["frexport_fr_status", "frexport_recorders", "c10d_health_check"])
def test_an_oversized_answer_is_not_read_past_its_bound_and_costs_only_its_rank(tmp_path, caplog, handler, length):
    hostile = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0)
    hostile.answers[handler] = stream_json(hostile, handler, 16 * MiB, length)
    honest = FakeAgentRank(str(tmp_path / "rank-1.sock"), 1)
    health, state = HealthRegistry(), LiveState()
    src = _source(tmp_path, health)
    try:
        with caplog.at_level(logging.WARNING):
            _pump_unbacked(src, state, 4)
        # the read stopped at the bound: 1 MiB for a status, 64 KiB for the others (and socket buffers)
        assert hostile.sent[handler] < 3 * MiB, hostile.sent
        by_name = {h.name: h for h in health.view()}
        bad = by_name["socket:rank-0"]
        assert not bad.up and bad.errors["too_large"] >= 2, bad.errors
        assert handler in bad.last_error and "parsed in the sidecar" in bad.last_error, bad.last_error
        said = [r for r in caplog.records if "socket:rank-0" in r.getMessage() and handler in r.getMessage()]
        assert len(said) == 1, caplog.text  # said once, counted at every poll
        assert by_name["socket:rank-1"].up and 1 in state.view().ranks
    finally:
        src.stop()
        hostile.close()
        honest.close()


def test_any_error_in_one_ranks_status_costs_only_that_rank(tmp_path, caplog, monkeypatch):
    """Under an address-space limit a status parse can raise MemoryError: it escaped the per-rank
    handling, so every collect of the source failed and the honest rank was never polled again."""
    status = worker_server._status

    def out_of_memory(doc):
        if doc.get("hostile"):
            raise MemoryError()
        return status(doc)

    monkeypatch.setattr(worker_server, "_status", out_of_memory)
    hostile = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0, {"frexport_fr_status": b'{"hostile": 1}'})
    honest = FakeAgentRank(str(tmp_path / "rank-1.sock"), 1)
    health, state = HealthRegistry(), LiveState()
    src = _source(tmp_path, health)
    try:
        _pump_unbacked(src, state, 4)  # raised MemoryError out of collect() before
        assert honest.asked.count("frexport_fr_status?backend=gloo") == 3  # polled at every status read
        by_name = {h.name: h for h in health.view()}
        assert by_name["socket:rank-0"].errors["internal"] >= 2 and not by_name["socket:rank-0"].up
        assert by_name["socket:rank-1"].up
        assert caplog.text.count("Traceback") == 1 and "MemoryError" in caplog.text
    finally:
        src.stop()
        hostile.close()
        honest.close()


def test_a_recorder_name_that_is_not_plain_ascii_is_refused_and_the_rank_polled_for_the_others(tmp_path, caplog):
    """'ŝ' passed the name check (str.isalnum) and then could not be encoded into the request line
    (UnicodeEncodeError): every poll of that rank failed. A name is 1-64 of [A-Za-z0-9._-], what goes
    into the URL as it is; others are refused, said once."""
    names = ("gloo", "\u015d", "nccl\u00e9", "x\x1b[31m", "a/b", "nccl2")
    rank = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0, recorders=names)
    health, state = HealthRegistry(), LiveState()
    src = _source(tmp_path, health)
    try:
        with caplog.at_level(logging.WARNING):
            _pump_unbacked(src, state, 3)
        h = next(h for h in health.view() if h.name == "socket:rank-0")
        assert h.up and not h.errors, (h.errors, h.last_error)
        assert state.latest_dumps()[0].recorders == ("gloo", "nccl2")
        assert all(a.isascii() and "\x1b" not in a and "a/b" not in a for a in rank.asked), rank.asked
        said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(said) == 1 and "'\\u015d'" in said[0] and "\\x1b" in said[0] and "\x1b" not in said[0], said
    finally:
        src.stop()
        rank.close()


def test_a_rank_listing_many_recorders_holds_no_more_entries_than_one(tmp_path, caplog):
    """max_entries held per recorder: a rank listing 16 recorders held 16 times what one may. Now its
    recorders share it, and at most 16 of a longer list are polled, said once."""
    from tests.support.synth import dump, entry

    names = tuple(f"r{i:02}" for i in range(20))
    body = json.dumps(dump([entry(i, i + 1) for i in range(100)], world=1)).encode()
    rank = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0, {"frexport_fr_live": body}, recorders=names)
    health, state = HealthRegistry(), LiveState()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=5.0, max_entries=160))
    try:
        with caplog.at_level(logging.WARNING):
            _pump_unbacked(src, state, 2)
        held = state.latest_dumps()[0]
        assert sorted(held.recorders) == list(names[:16]) and len(held.entries) == 160  # 10 of each, the newest
        assert caplog.text.count("lists 20 recorders: the first 16 are polled") == 1
    finally:
        src.stop()
        rank.close()


def test_a_pods_evidence_fetch_reads_each_answer_to_its_kinds_bound(tmp_path):
    """A pod's own bundle fetches every rank's pickle and the culprits' stacks: each answer was read to the
    poll's 64 MiB (4 ranks answering 60 MiB took `serve` to 1.2 GB). A pickle is read to 32 MiB, stacks
    to 4 MiB (the job view's bounds, sources/handlers.py fetch_cap); past it, only that answer fails."""
    from frexport.sources.handlers import FETCH_MAX_PICKLE, PICKLE_HANDLER, TRACEBACK_HANDLER, fetch_cap
    from frexport.sources.http_client import PeerError

    hostile = FakeAgentRank(str(tmp_path / "rank-0.sock"), 0)
    hostile.answers[PICKLE_HANDLER] = stream_json(hostile, PICKLE_HANDLER, 60 * MiB, False)
    hostile.answers[TRACEBACK_HANDLER] = stream_json(hostile, TRACEBACK_HANDLER, 16 * MiB, True)
    honest = FakeAgentRank(str(tmp_path / "rank-1.sock"), 1)
    honest.answers[PICKLE_HANDLER] = b"a pickle"
    src = _source(tmp_path, HealthRegistry())
    try:
        targets = {t.rank: t for t in src.targets()}
        got = src.fetch_all([(targets[0], f"{PICKLE_HANDLER}?backend=gloo"), (targets[0], TRACEBACK_HANDLER),
                             (targets[1], f"{PICKLE_HANDLER}?backend=gloo")], 30.0)
        assert isinstance(got[(0, f"{PICKLE_HANDLER}?backend=gloo")], PeerError)
        assert got[(0, f"{PICKLE_HANDLER}?backend=gloo")].reason == "too_large"
        assert isinstance(got[(0, TRACEBACK_HANDLER)], PeerError)  # its length said 16 MiB: not even read
        assert got[(1, f"{PICKLE_HANDLER}?backend=gloo")] == b"a pickle"
        assert hostile.sent[PICKLE_HANDLER] < FETCH_MAX_PICKLE + 2 * MiB, hostile.sent
        assert fetch_cap("dump_traceback") < fetch_cap(f"{PICKLE_HANDLER}?backend=nccl2") == FETCH_MAX_PICKLE
    finally:
        hostile.close()
        honest.close()


def test_an_error_deciding_one_ranks_read_costs_only_that_rank(tmp_path, caplog, monkeypatch):
    """What a status read decides is worked out on the loop's thread, outside any rank's poll: an error
    there (a bug, or MemoryError) must still cost only that rank's poll, said and counted as before."""
    decide, rank_0_decided = EntrySchedule.decide, []

    def failing(self, rank, now, suspected):
        if rank == 0:
            rank_0_decided.append(now)
            if len(rank_0_decided) > 1:  # its first read decides as ever; what its status reads decide fails
                raise MemoryError()
        return decide(self, rank, now, suspected)

    monkeypatch.setattr(EntrySchedule, "decide", failing)
    ranks = [FakeAgentRank(str(tmp_path / f"rank-{r}.sock"), r) for r in range(2)]
    health, state = HealthRegistry(), LiveState()
    src = _source(tmp_path, health)
    try:
        _pump_unbacked(src, state, 4)
        assert ranks[1].asked.count("frexport_fr_status?backend=gloo") == 3
        by_name = {h.name: h for h in health.view()}
        assert by_name["socket:rank-0"].errors["internal"] >= 2 and not by_name["socket:rank-0"].up
        assert by_name["socket:rank-1"].up and 1 in state.view().ranks
        assert "MemoryError" in caplog.text
    finally:
        src.stop()
        for r in ranks:
            r.close()


def test_a_status_that_never_comes_holds_only_its_rank(tmp_path):
    """The status reads of a turn are made together from the loop's thread (http_client.request_all): a
    rank whose status never comes ends at its timeout, and every other rank's status is read and taken
    in the same turn, not one timeout after another."""
    def silent(handler) -> None:
        time.sleep(3)  # past the 0.5 s timeout: the sidecar hangs up first

    ranks = [FakeAgentRank(str(tmp_path / f"rank-{r}.sock"), r) for r in range(5)]
    health, state = HealthRegistry(), LiveState()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), timeout=0.5, poll_interval=0.0, status_interval=0.0,
                                                   entries_interval=3600.0, suspect_after=3600.0))
    try:
        _pump_unbacked(src, state, 1)  # each rank's first, whole read
        for r in (1, 2, 3):
            ranks[r].answers["frexport_fr_status"] = silent
        start = time.monotonic()
        _pump_unbacked(src, state, 2)
        # one timeout (0.5 s) and room: the three silent ranks one after another take 1.5 s
        assert time.monotonic() - start < 1.2
        for r in (0, 4):
            assert ranks[r].asked.count("frexport_fr_status?backend=gloo") == 2
        errors = {h.name: h.errors for h in health.view()}
        assert [errors[f"socket:rank-{r}"]["timeout"] for r in range(5)] == [0, 1, 1, 1, 0]
    finally:
        src.stop()
        for r in ranks:
            r.close()
