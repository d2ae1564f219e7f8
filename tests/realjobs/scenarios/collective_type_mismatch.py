"""Rank 1 calls broadcast where its peers call all_reduce: every rank hangs."""
from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    t = torch.ones(16)
    if rank == 1 and step == 2:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)


for step in range(4):
    train_step(step)
hold()
