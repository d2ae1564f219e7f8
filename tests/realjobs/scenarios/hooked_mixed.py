"""4 ranks: the default group on asyncstore (recorded by torch 2.15's FlightRecorderHook into the
`asyncstore` recorder), a gloo group of all ranks for CPU metadata (gloo's own recorder). Each step an
asyncstore all_reduce of the gradients, then a gloo all_reduce of the token count. At step 3 rank 2 gets
stuck in host code, before the asyncstore all_reduce (STUCK_BEFORE=hooked) or between the two
(STUCK_BEFORE=gloo)."""
import os

from _hooked import dist, hold, init, stuck, torch

BEFORE = os.environ.get("STUCK_BEFORE", "hooked")
rank, world, server = init()
meta = dist.new_group(backend="gloo", group_desc="cpu_meta")


def train_step(step):
    if rank == 2 and step == 3 and BEFORE == "hooked":
        stuck("in its data loader")
    grads = torch.ones(16) * step
    dist.all_reduce(grads)
    if rank == 2 and step == 3 and BEFORE == "gloo":
        stuck("counting tokens")
    tokens = torch.tensor([100 + step])
    dist.all_reduce(tokens, group=meta)


for step in range(6):
    train_step(step)
hold()
