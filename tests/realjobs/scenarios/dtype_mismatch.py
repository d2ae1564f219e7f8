"""Rank 1 all_reduces bfloat16 where its peers use float16 (same width: completes with wrong data)."""
from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    dtype = torch.bfloat16 if (rank == 1 and step == 1) else torch.float16
    grads = torch.ones(16, dtype=dtype)
    dist.all_reduce(grads)


for step in range(3):
    train_step(step)
dist.barrier()
hold()
