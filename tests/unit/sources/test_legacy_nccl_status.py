"""Status first without the agent, where PyTorch offers a status-only read: the legacy NCCL recorder's
`dump_nccl_trace_json?includecollectives=false` (issue 29, point 3).

The worker server is a fake: no machine here has a GPU, so no real NCCL group fills that recorder.
Its answers have the layout the CUDA wheels of 2.14.1 and 2.15.0 give on this machine (their handler
takes the parameter and answers `{"comm_lib_version", "nccl_comm_state", "pg_config", "pg_status",
"version"}`, entries only without it), with NCCL entries in PyTorch's JSON form."""

import json
import time
from urllib.parse import urlsplit

from frexport.config import WorkerServers
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.worker_server import WorkerServerSource
from tests.support.live import pump
from tests.support.synth import entry
from tests.support.unix_http import QuietHandler, serve_unix


class NcclRank:
    """PyTorch's handlers only, gloo's recorder empty, the legacy NCCL one at `self.done` collectives."""

    def __init__(self, path: str) -> None:
        self.done, self.asked = 3, []
        rank = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                self.send(b'["dump_nccl_trace_json", "dump_nccl_trace_pickle", "fr_trace_json", "ping"]')

            def do_POST(self):  # noqa: N802
                url = urlsplit(self.path)
                rank.asked.append(url.path.rsplit("/", 1)[-1] + (f"?{url.query}" if url.query else ""))
                if url.path == "/handler/fr_trace_json":
                    return self.send(json.dumps({"comm_lib_version": "", "pg_config": {}, "pg_status": {},
                                                 "version": "2.10"}).encode())
                if url.path != "/handler/dump_nccl_trace_json":
                    return self.send(b"", status=404)
                n = str(rank.done)
                doc = {"comm_lib_version": "2.27.3", "nccl_comm_state": {}, "version": "2.10",
                       "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                       "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": n,
                                           "last_completed_collective": n}}}
                if "includecollectives=false" not in url.query:
                    doc["entries"] = [{**entry(i, i + 1, backend="nccl"), "frames": []} for i in range(rank.done)]
                self.send(json.dumps(doc).encode())

        self.server = serve_unix(path, Handler)


def _watched(tmp_path, entries_interval: float) -> tuple[NcclRank, HealthRegistry, WorkerServerSource, LiveState]:
    """One such rank, and a source that reads its status at every poll (no stall suspected)."""
    rank = NcclRank(str(tmp_path / "rank-0.sock"))
    health = HealthRegistry()
    src = WorkerServerSource(health, WorkerServers(str(tmp_path), poll_interval=0.0, status_interval=0.0,
                                                   entries_interval=entries_interval, suspect_after=3600.0))
    return rank, health, src, LiveState()


def test_the_legacy_nccl_recorder_is_read_status_first_through_pytorchs_handler(tmp_path):
    rank, health, src, state = _watched(tmp_path, entries_interval=3600.0)
    try:
        pump(src, state)  # first: the recorders are probed, the NCCL one holds the group: its entries read
        rank.asked.clear()
        pump(src, state)  # nothing moved: its status alone
        pump(src, state)
        assert rank.asked == ["dump_nccl_trace_json?includecollectives=false"] * 2
        dump = state.latest_dumps()[0]
        assert dump.read_via == "pytorch" and dump.read_mode == "status_first" and dump.recorders == ("nccl",)
        rank.done = 5  # it moved: not due for an hour, its status keeps the gauges fresh meanwhile
        pump(src, state)
        assert state.view().ranks[0].groups["nccl:0"].current() == (5, 5, 5)
        assert len(state.latest_dumps()[0].entries) == 3  # the entries wait for their read
        assert health.reads() == {"first": 1, "status": 3}
    finally:
        src.stop()
        rank.server.shutdown()


def test_a_rank_whose_entries_are_due_is_fetched_without_its_status_read_first(tmp_path):
    """Its status could only say it moved again (it moved at the last read: a status never goes
    back), so that read is not made; its entries arrive with their own status, none missed."""
    rank, health, src, state = _watched(tmp_path, entries_interval=0.3)
    try:
        pump(src, state)  # first: its entries
        rank.done = 6
        rank.asked.clear()
        pump(src, state)  # moved, not due: its status alone
        assert rank.asked == ["dump_nccl_trace_json?includecollectives=false"]
        time.sleep(0.35)
        rank.done = 9
        rank.asked.clear()
        assert pump(src, state) == 1
        assert rank.asked == ["dump_nccl_trace_json"]  # its entries, no status read before them
        assert [e.collective_seq_id for e in state.latest_dumps()[0].entries] == list(range(1, 10))
        assert state.view().ranks[0].groups["nccl:0"].current() == (9, 9, 9)
        rank.asked.clear()
        pump(src, state)  # read again next turn: nothing new since those entries
        assert rank.asked == ["dump_nccl_trace_json?includecollectives=false"]
        assert health.reads()["status"] == 2
    finally:
        src.stop()
        rank.server.shutdown()
