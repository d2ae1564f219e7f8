"""Healthy: default group plus tp and dp subgroups, async ops and p2p, every collective completes."""
from _common import dist, hold, init, torch

rank, world, server = init()
tp = [dist.new_group([0, 1], group_desc="tp"), dist.new_group([2, 3], group_desc="tp")][rank // 2]
dp = [dist.new_group([0, 2], group_desc="dp"), dist.new_group([1, 3], group_desc="dp")][rank % 2]


def train_step(step):
    x = torch.ones(8) * (rank + step)
    dist.all_reduce(x, group=tp)
    out = torch.empty(2 * 8)
    dist.all_gather_into_tensor(out, x, group=dp)
    dist.broadcast(x, src=0)
    shard = torch.empty(4)
    dist.reduce_scatter_tensor(shard, x, group=tp)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    peer = rank ^ 1
    if rank % 2 == 0:
        dist.send(x, peer)
    else:
        dist.recv(x, peer)


for step in range(3):
    train_step(step)
dist.barrier()
hold()
