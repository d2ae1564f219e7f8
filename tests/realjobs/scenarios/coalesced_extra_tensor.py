"""Gradients are all_reduced in a coalesced group (one all_reduce per bucket, issued together). At
step 4 rank 1 passes an extra tensor: gloo fails the coalesced collective, aborting a peer, while the
culprit lives on. (torchrun runs with a long --monitor-interval so the survivors are captured.)"""
import sys
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def reduce_gradients(buckets):
    with dist._coalescing_manager():
        for b in buckets:
            dist.all_reduce(b)


def train_step(step):
    time.sleep(0.5)  # forward/backward
    buckets = [torch.ones(16) * step, torch.ones(8) * step]
    if rank == 1 and step == 4:
        buckets.append(torch.ones(4))  # a parameter only this rank has
    reduce_gradients(buckets)


try:
    for step in range(6):
        train_step(step)
except RuntimeError as e:
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
hold()
