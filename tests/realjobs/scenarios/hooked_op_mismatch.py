"""4 ranks on asyncstore: at step 2 rank 1 calls broadcast where its peers call all_reduce. The members
disagree on the collective, so asyncstore never completes it (as NCCL ranks would wait): every rank
hangs, each entry already retired at issue."""
from _hooked import dist, hold, init, torch

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
