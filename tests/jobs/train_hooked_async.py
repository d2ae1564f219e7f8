"""train_hooked.py on an ASYNCHRONOUS out-of-tree backend: the form users of NCCL-like backends see.

The default group runs on `asyncstore` (tests/realjobs/scenarios/_async_backend.py, the one copy): each op
returns at once a future-backed Work that a worker thread completes once every member posted, so torch
2.15's `FlightRecorderHook` (no completion hook for a Python backend) retires every entry when it is
issued, and the ranks then block in `work.wait()`, their entries already retired. A gloo subgroup (gloo's
own recorder) does a second all_reduce every step. Environment as train.py: STEPS, STEP_S, STUCK_RANK +
STUCK_STEP (that rank hangs before the step's asyncstore all_reduce), MARK_DIR.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "realjobs", "scenarios"))
import _async_backend  # noqa: E402

STEPS = int(os.environ.get("STEPS", "20"))
STEP_S = float(os.environ.get("STEP_S", "0.05"))
STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))
STUCK_STEP = int(os.environ.get("STUCK_STEP", "-1"))
MARK_DIR = os.environ.get("MARK_DIR", "/tmp")

_async_backend.register()
dist.init_process_group(_async_backend.NAME)
rank = dist.get_rank()
cpu_group = dist.new_group(backend="gloo")


def load_batch(step):
    if rank == STUCK_RANK and step == STUCK_STEP:
        open(os.path.join(MARK_DIR, "stuck"), "w").write(str(time.time()))
        while True:
            time.sleep(0.5)  # the data loader never returns
    return torch.ones(64) * step


def train_step(step):
    batch = load_batch(step)
    dist.all_reduce(batch)  # returns at once inside the backend; blocks in work.wait()
    dist.all_reduce(batch, group=cpu_group)
    time.sleep(STEP_S)


for step in range(STEPS):
    train_step(step)
open(os.path.join(MARK_DIR, f"done_{rank}"), "w").write(str(time.time()))
os._exit(0)  # a Python backend's teardown at exit aborts in torch 2.15: not what is tested here
