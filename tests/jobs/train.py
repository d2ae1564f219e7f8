"""A small gloo training loop for the real-job tests, shaped by environment variables.

STEPS (default 20), STEP_S (sleep per step, default 0.05), SLOW_RANK + SLOW_S (one rank is slow
every step), STUCK_RANK + STUCK_STEP (that rank hangs in its data loader at that step, or at the
first step once STUCK_FILE exists, writing $MARK_DIR/stuck and $MARK_DIR/stuck_rank when it does;
STUCK_LOCAL_RANK picks the rank by its local rank instead, for a multi-node job whose global ranks
the rendezvous assigns), HOLD_S (after the loop, stay alive this long; default 0),
ENV_DUMP (write the rank's FR environment to $MARK_DIR/env_<rank>), STARTED_MARK (write
$MARK_DIR/started_<rank> once the first step's collective is done).
"""

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "20"))
STEP_S = float(os.environ.get("STEP_S", "0.05"))
SLOW_RANK = int(os.environ.get("SLOW_RANK", "-1"))
SLOW_S = float(os.environ.get("SLOW_S", "0.3"))
STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))
STUCK_STEP = int(os.environ.get("STUCK_STEP", "-1"))
STUCK_LOCAL_RANK = int(os.environ.get("STUCK_LOCAL_RANK", "-1"))
MARK_DIR = os.environ.get("MARK_DIR", "/tmp")
STUCK_FILE = os.environ.get("STUCK_FILE", "")  # STUCK_RANK hangs at the first step after this file appears

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
local_rank = int(os.environ.get("LOCAL_RANK", "-1"))
stuck_here = rank == STUCK_RANK or (STUCK_LOCAL_RANK >= 0 and local_rank == STUCK_LOCAL_RANK)
if os.environ.get("ENV_DUMP"):
    with open(os.path.join(MARK_DIR, f"env_{rank}"), "w") as f:
        json.dump({k: v for k, v in os.environ.items() if k.startswith(("TORCH_FR", "TORCH_NCCL", "FREXPORT"))}, f)


def load_batch(step):
    if rank == SLOW_RANK:
        time.sleep(SLOW_S)  # a slow disk on this rank's node
    if stuck_here and (step == STUCK_STEP or (STUCK_FILE and os.path.exists(STUCK_FILE))):
        open(os.path.join(MARK_DIR, "stuck_rank"), "w").write(str(rank))
        open(os.path.join(MARK_DIR, "stuck"), "w").write(str(time.time()))
        while True:
            time.sleep(0.5)  # the data loader never returns
    return torch.ones(64) * step


def train_step(step):
    batch = load_batch(step)
    dist.all_reduce(batch)
    time.sleep(STEP_S)


for step in range(STEPS):
    train_step(step)
    if step == 0 and os.environ.get("STARTED_MARK"):  # the first collective is recorded: poll from here
        open(os.path.join(MARK_DIR, f"started_{rank}"), "w").write(str(time.time()))
open(os.path.join(MARK_DIR, f"done_{rank}"), "w").write(str(time.time()))
time.sleep(float(os.environ.get("HOLD_S", "0")))
dist.destroy_process_group()
