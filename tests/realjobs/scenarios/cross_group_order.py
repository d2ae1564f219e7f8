"""Two groups, two orders: every rank all_reduces on the default group, then on its tp group of 4;
at step 2 rank 6 takes a code path that issues the tp call first. Ranks 0-5 and 7 block in the
default group waiting for rank 6; rank 6 blocks in tp waiting for 4, 5 and 7: a deadlock."""
from _common import dist, hold, init, torch

rank, world, server = init()
tp = [dist.new_group([0, 1, 2, 3], group_desc="tp"), dist.new_group([4, 5, 6, 7], group_desc="tp")][rank // 4]


def train_step(step):
    grads, acts = torch.ones(32), torch.ones(8)
    first, second = (None, tp) if not (rank == 6 and step == 2) else (tp, None)  # the buggy path
    dist.all_reduce(grads, group=first)
    dist.all_reduce(acts, group=second)


for step in range(4):
    train_step(step)
hold()
