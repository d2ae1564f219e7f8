"""A healthy 8-rank job snapshotted mid-run: every step each rank computes (0.05-0.2 s; the ranks of
the second group of 4 get the larger batches, 0.3-1.2 s), then all_reduces on the default group and
all_gathers in its group of 4, so at most moments ranks 0-3 wait inside the all_reduce for peers
still computing. Nothing is wrong."""
import random
import time

from _common import dist, hold, init, torch

rank, world, server = init()
half = [dist.new_group([0, 1, 2, 3], group_desc="ep"), dist.new_group([4, 5, 6, 7], group_desc="ep")][rank // 4]
rng = random.Random(rank)

for _ in range(200):
    time.sleep((0.3 + 0.9 * rng.random()) if rank >= 4 else (0.05 + 0.15 * rng.random()))  # forward/backward
    grads = torch.ones(16)
    dist.all_reduce(grads)
    out = torch.empty(4 * 8)
    dist.all_gather_into_tensor(out, torch.ones(8), group=half)
hold()
