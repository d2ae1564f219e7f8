"""The agent's live-poll handler (frexport/agent/live.py): its cursor, its names, its last read at exit.
On real PyTorch Flight Recorder pickles (a torch job records them): tests/e2e/test_live_handler_pickles.py."""

import pytest

from frexport.agent import live
from frexport.sources import worker_server


def test_the_cursor_parameter():
    assert live.parse_after("") is None
    assert live.parse_after("1234") == 1234
    for bad in ("-1", "12a", "1e3", "9" * 30):
        with pytest.raises(ValueError):
            live.parse_after(bad)


def test_the_sidecar_asks_for_the_agents_handler_by_its_name():
    assert worker_server.LIVE_HANDLER == live.LIVE_HANDLER
    assert worker_server.FIRST_RECORD_KEY == live.FIRST_RECORD_KEY
    assert worker_server.RECORDERS_HANDLER == live.RECORDERS_HANDLER
    assert (worker_server.STATUS_HANDLER, worker_server.BUFFER_SIZE_KEY, worker_server.EXITING_KEY) == \
        (live.STATUS_HANDLER, live.BUFFER_SIZE_KEY, live.EXITING_KEY)
    from frexport import agent
    from frexport.sources import handlers
    assert handlers.PICKLE_HANDLER == agent.PICKLE_HANDLER


def test_at_exit_the_last_read_is_waited_for_only_where_a_sidecar_reads_status_first():
    import pickle
    import threading
    import time as _time

    final = live.FinalRead(lambda: ["gloo", "nccl2"], window_s=5.0, max_s=5.0)
    t0 = _time.monotonic()
    final.wait()  # no status asked lately: nobody will read, no wait (a wait would be the 5 s window)
    assert _time.monotonic() - t0 < 2.5
    final = live.FinalRead(lambda: ["gloo", "nccl2"], window_s=5.0, max_s=5.0)
    final.status_asked()
    waiter = threading.Thread(target=final.wait)
    waiter.start()
    _time.sleep(0.2)
    assert waiter.is_alive() and final.exiting
    assert b'"frexport_exiting":true' in live.status_dump(lambda *a: pickle.dumps({"pg_status": {}}), final.exiting)
    final.entries_read("")  # the first recorder (gloo's)
    _time.sleep(0.1)
    assert waiter.is_alive()  # nccl2's entries not read yet
    final.entries_read("nccl2")
    waiter.join(1.0)
    assert not waiter.is_alive()


class _Req:
    def __init__(self, **params: str) -> None:
        self.params = params

    def get_param(self, name: str) -> str:
        return self.params.get(name, "")


class _Resp:
    def set_content(self, body, content_type: str) -> None:
        self.body, self.content_type = body, content_type

    def set_status(self, status: int) -> None:
        self.status = status


def test_the_answer_comes_in_the_form_asked():
    import json
    import pickle
    dump = pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {},
                         "entries": [{"record_id": i} for i in range(3)]}, protocol=2)
    handler = live.make_handler(lambda backend: (lambda *flags: dump))
    answers = {}
    for fmt in ("", "json", "pickle", "xml"):
        resp = _Resp()
        handler(_Req(after="1", format=fmt), resp)
        answers[fmt] = resp
    assert answers["json"].status == answers[""].status == 200 and answers[""].body == answers["json"].body
    assert [e["record_id"] for e in json.loads(answers["json"].body)["entries"]] == [1, 2]
    # the pickle as it is where no cut can be made (not PyTorch's layout): the sidecar keeps from `after` on
    assert (answers["pickle"].status, answers["pickle"].body, answers["pickle"].content_type) == \
           (200, dump, "application/octet-stream")
    assert answers["xml"].status == 400 and "json or pickle" in answers["xml"].body


def test_the_status_leaves_out_the_groups_member_lists():
    """The sidecar reads only pg_status, the buffer size and the exit flag of a status, once a second a
    rank: a 16384-rank job's pg_config (every group's members as a string, as PyTorch's dump has it)
    would be encoded by the trainer and parsed by the sidecar at each read, and pass the sidecar's 1 MiB
    bound on in-process answers past ~145,000 ranks, sooner with more groups that large (docs/security.md)."""
    import json
    import pickle

    members = str(list(range(16384)))
    dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": members}},
            "pg_status": {"0": {"last_enqueued_collective": 7, "last_started_collective": 7,
                                "last_completed_collective": 6}}, "entries": []}
    status = live.status_dump(lambda *a: pickle.dumps(dump))
    assert len(status) < 300 and "pg_config" not in json.loads(status)
    assert json.loads(status)["pg_status"] == dump["pg_status"]
