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

    c10d._register_handler("fr_trace_pickle", pickle_handler)
    with open(os.path.join(os.environ["FR_SOCKET_DIR"], f"rank-{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))  # for a capture that takes py-spy dumps (its rank is in the name)
    return c10d._WorkerServer(path)


def hold() -> None:
    """Stay alive (and answering) until the capture kills the job."""
    import time

    while True:
        time.sleep(1)
