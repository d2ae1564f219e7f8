"""Rank 1 is slow (0.3 s of extra work before each collective) but every collective completes."""
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    if rank == 1:
        time.sleep(0.3)  # a slow data loader on one node
    t = torch.ones(16)
    dist.all_reduce(t)


for step in range(12):
    train_step(step)
dist.barrier()
hold()
