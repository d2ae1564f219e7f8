"""A 2x2 tp x dp grid (tp {0,1}, {2,3}; dp {0,2}, {1,3}): each step all_reduces on tp, then on dp.
Rank 0 is data-starved: 0.4 s late to every step. Its tp peer 1 waits for it in tp and so arrives late
at its own dp all_reduce with rank 3: inherited lateness, not its own. (The issue's 4x4 grid has 16
ranks; 4 keep the job within a 2-core machine: the same chain, one hop.)"""
import time

from _common import dist, hold, init, torch

rank, world, server = init()
tp = [dist.new_group([0, 1], group_desc="tp"), dist.new_group([2, 3], group_desc="tp")][rank // 2]
dp = [dist.new_group([0, 2], group_desc="dp"), dist.new_group([1, 3], group_desc="dp")][rank % 2]


def train_step(step):
    time.sleep(0.1)  # forward/backward
    if rank == 0:
        time.sleep(0.4)  # waiting for data
    x = torch.ones(32) * step
    dist.all_reduce(x, group=tp)
    dist.all_reduce(x, group=dp)


for step in range(24):
    train_step(step)
hold()
