"""A gloo loop in which one rank dies of an exception, uncaught, as a NaN check kills a real job.

Every rank prints `rank R step S` to stdout each step. Rank CRASH_RANK raises
RuntimeError("loss is NaN at step S") at the first step after CRASH_FILE exists, 2 s into that step's
compute: its traceback on stderr is its last words. (The 2 s let a live sidecar read its last
collective: a rank that dies within a poll of its last collective leaves an older record, which the
analysis rightly reads as a stale dump, not as a rank that left.) Its ring neighbours fail out of
that step's all_reduce ("Connection closed by peer"), say so on stderr and stay; the other ranks wait
in it. Run it under torchrun with a long
--monitor-interval so that torchrun leaves the survivors be.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

CRASH_RANK = int(os.environ.get("CRASH_RANK", "3"))
CRASH_FILE = os.environ["CRASH_FILE"]

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()


def train_step(step):
    time.sleep(0.2)  # forward/backward
    loss = torch.ones(64) * step
    if rank == CRASH_RANK and os.path.exists(CRASH_FILE):
        time.sleep(2)
        raise RuntimeError(f"loss is NaN at step {step}")
    dist.all_reduce(loss)


try:
    for step in range(100000):
        train_step(step)
        print(f"rank {rank} step {step}", flush=True)
except RuntimeError as e:
    if rank == CRASH_RANK:
        raise
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
while True:
    time.sleep(1)
