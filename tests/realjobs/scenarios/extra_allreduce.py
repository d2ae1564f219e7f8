"""The PyTorch FR tutorial's crash.py: rank 0 issues one all_reduce the others never issue; it hangs."""
from _common import dist, hold, init, torch

rank, world, server = init()


def train_step():
    t = torch.rand(16)
    dist.all_reduce(t)


for _ in range(3):
    train_step()
if rank == 0:
    t = torch.rand(16)
    dist.all_reduce(t)  # the extra collective: only rank 0 gets here
hold()
