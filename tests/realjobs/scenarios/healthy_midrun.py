"""A healthy 8-rank job snapshotted mid-run: every step each rank computes for a rank-dependent
0.1-0.4 s, then all_reduces on the default group and all_gathers in its group of 4, so at any
moment some ranks wait inside a collective for peers still computing. Nothing is wrong."""
import random
import time

from _common import dist, hold, init, torch

rank, world, server = init()
half = [dist.new_group([0, 1, 2, 3], group_desc="ep"), dist.new_group([4, 5, 6, 7], group_desc="ep")][rank // 4]
rng = random.Random(rank)

for _ in range(200):
    time.sleep(0.1 + 0.3 * rng.random())  # forward/backward
    grads = torch.ones(16)
    dist.all_reduce(grads)
    out = torch.empty(4 * 8)
    dist.all_gather_into_tensor(out, torch.ones(8), group=half)
hold()
