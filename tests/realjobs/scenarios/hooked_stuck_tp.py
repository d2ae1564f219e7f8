"""8 ranks, every group on asyncstore (an async, NCCL-like out-of-tree backend: torch 2.15 records it with
its FlightRecorderHook, every entry retired at issue). tp groups {0-3}, {4-7}, dp groups {i, i+4}; each step
a tp all_gather, a dp all_reduce and a default-group all_reduce. At step 4 rank 5 never leaves its data
loader: its tp peers 4, 6, 7 issue the all_gather and wait in it; 0, 2, 3 wait in dp for them, 1 for 5."""
from _hooked import dist, hold, init, stuck, torch

rank, world, server = init()
tp = [dist.new_group([0, 1, 2, 3], group_desc="tp"), dist.new_group([4, 5, 6, 7], group_desc="tp")][rank // 4]
dp = [dist.new_group([i, i + 4], group_desc="dp") for i in range(4)][rank % 4]


def load_batch(step):
    if rank == 5 and step == 4:
        stuck("in its data loader")
    return torch.ones(8) * step


def train_step(step):
    batch = load_batch(step)
    shards = [torch.zeros(8) for _ in range(4)]
    dist.all_gather(shards, batch, group=tp)
    grads = torch.cat(shards)
    dist.all_reduce(grads, group=dp)
    loss = grads.sum().reshape(1)
    dist.all_reduce(loss)


for step in range(6):
    train_step(step)
hold()
