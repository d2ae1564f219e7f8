"""Rank 3 is SIGKILLed during step 6's compute, after step 5's all_reduce. Its ring neighbours 0 and 2
fail in step 6's all_reduce and exit (the error is uncaught, as in most training scripts), and rank 1
fails after them: the job collapses. Every dump is the last one its rank answered before it died, and
no rank answers for its stack. (torchrun runs with a long --monitor-interval so that it does not kill
the ranks itself.)"""
import os
import signal
import time

from _common import dist, hold, init, torch

rank, world, server = init()


def train_step(step):
    time.sleep(1.0)  # forward/backward
    if step == 6 and rank == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    grads = torch.ones(64) * step
    dist.all_reduce(grads)


for step in range(8):
    train_step(step)
hold()
