"""A pp 2 x dp 2 x tp 4 job of 16 ranks (rank = 8 * stage + 4 * dp + tp): tp groups of 4 consecutive
ranks, dp pairs {r, r + 4} within a stage, and stage 0's rank r feeds stage 1's rank r + 8 by send/recv.
Each step stage 0 runs its tp all_reduce and sends its activations to stage 1, which receives them, runs
its tp all_reduce and sends the gradients back; then each stage all_reduces its gradients over dp.

At step 3 rank 9 (stage 1) sticks in host code after receiving its activations, before its tp
all_reduce: its tp peers 8, 10, 11 wait for it in tp; stage 0's ranks 0-3, which feed them, wait in
recv for the gradients (gloo records no send/recv); ranks 4-7 and 12-15 wait in their dp groups for
them. Culprit: rank 9. (py-spy dumps with --locals name the peer of each recv.) DP=3 makes it the
issue's 24 ranks, pp 2 x dp 3 x tp 4: rank 13 sticks, 0-3 wait in recv, 4-11 and 16-23 in dp."""
import os
import time

from _common import dist, hold, init, torch

rank, world, server = init()
DP_SIZE = int(os.environ.get("DP", "2"))  # 3: the 24 ranks
STAGE_SIZE = 4 * DP_SIZE
STAGE, TP = rank // STAGE_SIZE, rank % 4
STUCK = STAGE_SIZE + 1  # stage 1's second rank: 9 with dp 2
tp = [dist.new_group(list(range(g * 4, g * 4 + 4)), group_desc="tp") for g in range(world // 4)][rank // 4]
dp = [dist.new_group([s * STAGE_SIZE + d * 4 + t for d in range(DP_SIZE)], group_desc="dp")
      for s in range(2) for t in range(4)][STAGE * 4 + TP]
PEER = rank + STAGE_SIZE if STAGE == 0 else rank - STAGE_SIZE  # the rank of the other stage this one talks to


def stage0(step):
    act = torch.ones(32) * step
    dist.all_reduce(act, group=tp)
    dist.send(act, dst=PEER)
    grad = torch.empty(32)
    dist.recv(grad, src=PEER)
    return grad


def stage1(step):
    act = torch.empty(32)
    dist.recv(act, src=PEER)
    if rank == STUCK and step == 3:
        while True:
            time.sleep(1)  # stuck in host code (a data-dependent loop that never ends)
    dist.all_reduce(act, group=tp)
    dist.send(act, dst=PEER)
    return act


for step in range(6):
    time.sleep(0.2)  # compute
    grad = stage0(step) if STAGE == 0 else stage1(step)
    dist.all_reduce(grad, group=dp)
hold()
