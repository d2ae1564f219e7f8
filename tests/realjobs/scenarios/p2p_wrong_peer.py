"""A 4-stage pipeline (stage = rank): forward sends activations to the next stage, backward sends
gradients to the previous one. At step 3 stage 2 sends its activations to stage 0 instead of 3: stage
3 waits for them forever, and every other stage waits for a gradient that never comes. gloo records
no send/recv: only the ranks' stacks show where each waits."""
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def forward(step, act):
    if rank > 0:
        dist.recv(act, src=rank - 1)
    if rank < world - 1:
        nxt = 0 if (rank == 2 and step == 3) else rank + 1  # the bug: the wrong peer
        dist.send(act, dst=nxt)


def backward(grad):
    if rank < world - 1:
        dist.recv(grad, src=rank + 1)
    if rank > 0:
        dist.send(grad, dst=rank - 1)


for step in range(5):
    time.sleep(0.2)
    act, grad = torch.ones(16) * step, torch.ones(16)
    forward(step, act)
    backward(grad)
    dist.all_reduce(grad)  # a collective per step: the recorder shows every step before the hang
hold()
