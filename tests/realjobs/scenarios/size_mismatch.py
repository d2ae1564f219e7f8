"""Rank 3 broadcasts into a larger buffer than its peers (gloo completes it silently), then all continue."""
from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    t = torch.ones(16)
    dist.all_reduce(t)
    n = 32 if (rank == 3 and step == 1) else 16  # the receiver's buffer is larger: no abort
    b = torch.zeros(n) if rank != 0 else torch.ones(16)
    dist.broadcast(b, src=0)


for step in range(3):
    train_step(step)
dist.barrier()
hold()
