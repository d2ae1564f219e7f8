"""A fake rank's worker server on a unix socket: a Flight Recorder that advances with wall time,
and a stack handler that can be made to never answer.

A fake on purpose: a real torch rank cannot be made to hang its `dump_traceback` handler while its
recorder handler keeps answering, which is what an incident looks like from the sidecar (a rank
stuck in native code, its Python stack unreachable). It serves what torch 2.13's worker server
serves: `GET /handler/` lists handlers, `POST /handler/<name>` answers one.
"""

from __future__ import annotations

import json
import threading
import time

from tests.support.synth import dump, entry
from tests.support.unix_http import QuietHandler, serve_unix

HANDLERS = ["fr_trace_json", "dump_traceback", "ping"]


class FakeRank:
    """Issues one all_reduce every `period_s` from `start`; from `stop_at` on (a wall time), stops
    (`stuck="absent"`: never issues the next one) or waits forever in the next one (`"inside"`)."""

    def __init__(self, rank: int, path: str, world: int, start: float, period_s: float = 0.1,
                 stop_at: float | None = None, stuck: str = "inside", hang_stacks: bool = False,
                 pyspy: bool = False, first_answer_s: float = 0.0) -> None:
        self.rank, self.world, self.start, self.period_s = rank, world, start, period_s
        self.stop_at, self.stuck, self.hang_stacks = stop_at, stuck, hang_stacks
        self.first_answer_s = first_answer_s  # the first recorder answer takes this long (a cold handler)
        self.polls: list[float] = []  # monotonic times of recorder requests
        self.stack_requests = 0
        self.pyspy_requests = 0
        handlers = HANDLERS + (["pyspy_dump"] if pyspy else [])
        self.release = threading.Event()  # frees a hanging handler at teardown
        fake = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                self.send(json.dumps(handlers).encode())

            def do_POST(self):  # noqa: N802
                name = self.path.rsplit("/", 1)[-1]
                if name == "fr_trace_json":
                    fake.polls.append(time.monotonic())
                    if len(fake.polls) == 1:
                        time.sleep(fake.first_answer_s)
                    self.send(fake.body())
                elif name == "dump_traceback":
                    fake.stack_requests += 1
                    if fake.hang_stacks:
                        fake.release.wait()  # never answers while the test runs
                        return
                    self.send(f"Thread 0x1 (most recent call first):\n  File \"/job/train.py\", line 10, in step "
                               f"(rank {fake.rank})\n".encode(), "text/plain")
                elif name == "pyspy_dump" and pyspy:
                    fake.pyspy_requests += 1
                    self.send(f"Process 1: python train.py (rank {fake.rank})\n".encode(), "text/plain")
                else:
                    self.send(b"Handler not found", "text/plain", 404)

        self.server = serve_unix(path, Handler)

    def body(self) -> bytes:
        now = time.time()
        issued = int((min(now, self.stop_at or now) - self.start) / self.period_s)
        t0 = int(self.start * 1e9)
        step = int(self.period_s * 1e9)
        es = [entry(i, i + 1, created=t0 + i * step + self.rank * 1000) for i in range(max(0, issued - 50), issued)]
        if self.stop_at is not None and now >= self.stop_at and self.stuck == "inside":
            es.append(entry(issued, issued + 1, state="started", created=t0 + issued * step))
        return json.dumps(dump(es, world=self.world)).encode()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
