"""4 ranks on asyncstore: at step 1 rank 3 broadcasts into a 32-element buffer where its peers use 16.
asyncstore, like NCCL, completes it silently (it copies what both hold); the job goes on to its end."""
from _hooked import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    t = torch.ones(16)
    dist.all_reduce(t)
    n = 32 if (rank == 3 and step == 1) else 16
    b = torch.zeros(n) if rank != 0 else torch.ones(16)
    dist.broadcast(b, src=0)


for step in range(3):
    train_step(step)
dist.barrier()
hold()
