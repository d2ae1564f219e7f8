"""MoE-style all_to_all_single with uneven but consistent splits (rank r sends r+j+1 rows to rank j);
at step 3 rank 1's input holds 3 rows more than its split sizes say. gloo fails on rank 1 at once
("Split sizes doesn't match total dim 0 size"), the trainer logs it and stays up; ranks 0, 2, 3 wait
in the same all_to_all for rank 1's data forever."""
import sys

from _common import dist, hold, init, torch

rank, world, server = init()


def dispatch(step):
    send = [rank + j + 1 for j in range(world)]
    recv = [j + rank + 1 for j in range(world)]
    extra = 3 if (rank == 1 and step == 3) else 0  # a routing bug on one rank
    tokens = torch.ones(sum(send) + extra, 4)
    out = torch.empty(sum(recv), 4)
    dist.all_to_all_single(out, tokens, recv, send)
    return out


try:
    for step in range(5):
        dispatch(step)
        dist.all_reduce(torch.ones(4))
except RuntimeError as e:
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
hold()
