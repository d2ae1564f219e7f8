"""4 ranks, ONE process group of two device backends, as a `cpu:gloo,cuda:nccl` job has: gloo serves its
CPU tensors (gloo's recorder), asyncstore its device tensors (the hook's `asyncstore` recorder), both
filed under the same group "0" with sequence numbers of their own. This machine has no GPU: the device is
PrivateUse1 (_hooked.DeviceTensor). Each step a gloo all_reduce of metadata, then an asyncstore
all_reduce of gradients; at step 3 rank 2 gets stuck between them."""
from _hooked import BACKEND, SPLIT_DEVICE, DeviceTensor, dist, hold, init, stuck, torch

rank, world, server = init(f"cpu:gloo,{SPLIT_DEVICE}:{BACKEND}", devices=(SPLIT_DEVICE,))


def train_step(step):
    tokens = torch.tensor([100 + step])
    dist.all_reduce(tokens)  # a CPU tensor: gloo
    if rank == 2 and step == 3:
        stuck("in its optimizer's host code")
    grads = DeviceTensor(torch.ones(16) * step)
    dist.all_reduce(grads)  # a device tensor: asyncstore


for step in range(6):
    train_step(step)
hold()
