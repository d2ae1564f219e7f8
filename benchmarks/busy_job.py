"""The busy gloo job of bench_busy_job.py: a small all_reduce every INTERVAL_S (default 2 ms), paced
by a schedule (not a sleep after each op, which would add the op's own time to every step).

Pausing: while $PAUSE_FILE exists the ranks stop between two collectives, all at the same one (the
flag travels in the all_reduce itself, so pausing adds no collective), and each writes
"<generation> <collectives issued> <longest stall in ms>" to $MARK_DIR/count_<rank>, the generation
being the pause file's content and the stall the most any step started late on its schedule since the
last pause (what a pause of the loop's Python thread costs the job). The benchmark compares the counts
with what the sidecar counted.
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

INTERVAL_S = float(os.environ.get("INTERVAL_S", "0.002"))
MARK_DIR = os.environ["MARK_DIR"]
PAUSE_FILE = os.environ["PAUSE_FILE"]

dist.init_process_group("gloo", timeout=timedelta(minutes=30))
rank = dist.get_rank()
issued = 0
stalled = 0.0  # the most a step started late since the last pause (s)


def pause() -> None:
    try:
        generation = open(PAUSE_FILE).read().strip()
    except OSError:  # removed since the flag was raised
        return
    tmp = os.path.join(MARK_DIR, f".count_{rank}")
    with open(tmp, "w") as f:
        f.write(f"{generation} {issued} {stalled * 1000:.2f}")
    os.replace(tmp, os.path.join(MARK_DIR, f"count_{rank}"))
    while os.path.exists(PAUSE_FILE):
        time.sleep(0.02)


buf = torch.zeros(64)
check_every = 25  # look for the pause file every 50 ms, not at every op
next_at = time.monotonic()
while True:
    buf.zero_()
    if issued % check_every == 0 and os.path.exists(PAUSE_FILE):
        buf[0] = 1.0
    dist.all_reduce(buf)
    issued += 1
    if buf[0] > 0:
        pause()
        next_at, stalled = time.monotonic(), 0.0
    next_at += INTERVAL_S
    delay = next_at - time.monotonic()
    stalled = max(stalled, -delay - INTERVAL_S)  # late by more than a step: the loop was held up
    if delay > 0:
        time.sleep(delay)
    elif delay < -0.1:  # far behind (the machine is busy): do not burst to catch up
        next_at = time.monotonic()
