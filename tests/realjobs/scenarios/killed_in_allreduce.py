"""Rank 2 is SIGKILLed (as the OOM killer does) inside step 6's all_reduce, while its peers wait in
it for rank 0 (late that step). Its ring neighbours 1 and 3 fail out of the collective ("Connection
closed by peer"; gloo retires failed work, so it looks completed), log it and stay up; rank 0 waits.
Rank 2's last dump shows it inside the all_reduce. (torchrun runs with a long --monitor-interval so
the survivors live on to be captured.)"""
import os
import signal
import sys
import threading
import time

from _common import dist, hold, init, torch

rank, world, server = init()
# (a capture of many ranks on a loaded machine needs longer to see rank 2 inside the all_reduce)
KILL_AFTER_S, LATE_S = float(os.environ.get("KILL_AFTER_S", "2")), float(os.environ.get("LATE_S", "4"))


def train_step(step):
    time.sleep(0.5)  # forward/backward
    grads = torch.ones(64) * step
    if step == 6 and rank == 0:
        time.sleep(LATE_S)  # a slow data loader this step: the others wait inside the all_reduce
    if step == 6 and rank == 2:
        threading.Timer(KILL_AFTER_S, os.kill, (os.getpid(), signal.SIGKILL)).start()
    dist.all_reduce(grads)


try:
    for step in range(8):
        train_step(step)
except RuntimeError as e:
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
hold()
