"""Imported by each scenario: serve this rank's Flight Recorder on <FR_SOCKET_DIR>/rank-<RANK>.sock.

PyTorch's worker server answers POST /handler/fr_trace_json (JSON, no stack frames); the extra
handler `fr_trace_pickle` returns the pickle dump, which carries each entry's Python frames.
"""

import os

import torch


def start() -> object:
    c10d = torch._C._distributed_c10d
    path = os.path.join(os.environ["FR_SOCKET_DIR"], f"rank-{os.environ['RANK']}.sock")
    if os.path.exists(path):
        os.unlink(path)

    def pickle_handler(req, resp):
        resp.set_content(c10d._dump_fr_trace(), "application/octet-stream")
        resp.set_status(200)
        _served[0] += 1

    c10d._register_handler("fr_trace_pickle", pickle_handler)
    with open(os.path.join(os.environ["FR_SOCKET_DIR"], f"rank-{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))  # for a capture that takes py-spy dumps (its rank is in the name)
    return c10d._WorkerServer(path)


_served = [0]  # pickle dumps answered: the capture asks for it after the JSON, so both are newer than a call


def wait_dumped(timeout_s: float = 120.0) -> None:
    """Return once the capture has taken this rank's dumps after this call (a rank about to stop
    answering makes sure its last dump holds what it did so far)."""
    import time

    before, deadline = _served[0], time.monotonic() + timeout_s
    while _served[0] < before + 2 and time.monotonic() < deadline:  # +2: a poll under way may predate the call
        time.sleep(0.1)


def hold() -> None:
    """Stay alive (and answering) until the capture kills the job."""
    import time

    while True:
        time.sleep(1)
