"""Rank 2 stops before an all_reduce (sleeps forever); ranks 0, 1, 3 block in it."""
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def load_batch(step):
    if rank == 2 and step == 3:
        while True:  # a stuck data loader, say
            time.sleep(1)
    return torch.ones(16) * step


def train_step(step):
    batch = load_batch(step)
    dist.all_reduce(batch)


for step in range(5):
    train_step(step)
hold()
