"""Uneven inputs: rank 3's data runs out after step 5 and it leaves the training loop and exits with
status 0 (the hang torch.distributed.algorithms.Join exists for), while its peers go on to step 6.
8 ranks, dp groups {0-3} and {4-7}; each step all_reduces the gradients on dp, then the loss on the
default group. In step 6 rank 3's ring neighbours in dp, 0 and 2, fail out of the dp all_reduce
("Connection closed by peer"; gloo retires failed work, so it looks completed) and rank 1 waits in
it; ranks 4-7 go on to the default group's all_reduce, where rank 3 never comes.

Rank 3 exits once the capture has dumped it after its last step, so its last dump holds everything it
did (the capture keeps it: torch empties the recorder as the process exits). STOP_SERVING_AFTER: the
step after which rank 3 stops answering (its socket goes away) once dumped, so its last dump is from
before it left: a stale dump.
(torchrun runs with a long --monitor-interval so the survivors live on to be captured.)"""
import os
import sys
import time

from _common import dist, hold, init, torch, wait_dumped

rank, world, server = init()
dp = [dist.new_group([0, 1, 2, 3], group_desc="dp"), dist.new_group([4, 5, 6, 7], group_desc="dp")][rank // 4]
BATCHES = 6 if rank == 3 else 9  # rank 3's shard of the data set is short
STOP_SERVING_AFTER = int(os.environ.get("STOP_SERVING_AFTER", "-1"))


def train_step(step):
    time.sleep(0.5)  # forward/backward
    grads = torch.ones(64) * step
    dist.all_reduce(grads, group=dp)
    loss = torch.ones(1) * step
    dist.all_reduce(loss)  # the loss for logging, over the whole job


try:
    for step in range(BATCHES):
        train_step(step)
        if rank == 3 and step == STOP_SERVING_AFTER:
            wait_dumped()
            os.unlink(os.path.join(os.environ["FR_SOCKET_DIR"], "rank-3.sock"))  # no more dumps of it
except RuntimeError as e:
    print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
if rank == 3:
    if STOP_SERVING_AFTER < 0:
        wait_dumped()  # (its final checkpoint)
    print("rank 3: out of data, done", file=sys.stderr, flush=True)
    sys.exit(0)
hold()
