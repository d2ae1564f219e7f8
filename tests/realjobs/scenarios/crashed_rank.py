"""Rank 3 crashes (an uncaught exception) 3 s into step 25's compute, after its last all_reduce of
step 24 (each step computes for 1 s: a loaded machine's capture has dumped every rank by then). Ranks 0-2 wait
in step 25's all_reduce; when rank 3's process dies its ring neighbours fail
with "Connection closed by peer", log it and stay up; the others keep waiting. (torchrun runs with a
long --monitor-interval so the survivors live on to be captured.)"""
import sys
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    time.sleep(1)  # forward/backward
    grads = torch.ones(64) * step
    if rank == 3 and step == 25:
        time.sleep(3)
        raise RuntimeError("loss is NaN")  # uncaught: the process exits
    dist.all_reduce(grads)


try:
    for step in range(27):
        train_step(step)
except RuntimeError as e:
    if rank == 3:
        raise
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
hold()
