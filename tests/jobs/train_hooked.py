"""A mixed job whose default group runs on an out-of-tree backend: the way torch 2.15 records nccl2.

`storecomm` is a real backend registered with `Backend.register_backend`: its all_reduce goes through
the rendezvous store (no gloo underneath). torch 2.15 records no backend outside its self-recording
set (gloo, nccl-legacy, xccl, fake) by itself: it attaches its `FlightRecorderHook` at group creation,
which files the ops in a recorder named after the backend, exactly as for nccl2. A gloo subgroup
(gloo's own recorder) does a second all_reduce every step: one rank, two recorders. Environment as
train.py: STEPS, STEP_S, STUCK_RANK + STUCK_STEP (that rank hangs before the step's collectives),
MARK_DIR.
"""

import os
import pickle
import time

import torch
import torch.distributed as dist

c10d = torch._C._distributed_c10d
STEPS = int(os.environ.get("STEPS", "20"))
STEP_S = float(os.environ.get("STEP_S", "0.05"))
STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))
STUCK_STEP = int(os.environ.get("STUCK_STEP", "-1"))
MARK_DIR = os.environ.get("MARK_DIR", "/tmp")


class StoreBackend(c10d.Backend):
    def __init__(self, store, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self.store, self.me, self.size, self.seq = store, rank, size, 0

    def getBackendName(self) -> str:
        return "storecomm"

    def allreduce(self, tensors, opts=None):
        self.seq += 1
        t = tensors[0]
        self.store.set(f"ar/{self.seq}/{self.me}", pickle.dumps(t.clone()))
        total = torch.zeros_like(t)
        for r in range(self.size):
            total += pickle.loads(self.store.get(f"ar/{self.seq}/{r}"))  # waits for every rank
        t.copy_(total)
        fut = torch.futures.Future()
        fut.set_result(tensors)
        return c10d._create_work_from_future(fut)


dist.Backend.register_backend("storecomm", lambda store, rank, size, timeout: StoreBackend(store, rank, size),
                              devices=["cpu"])
dist.init_process_group("cpu:storecomm")
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
    dist.all_reduce(batch)
    dist.all_reduce(batch, group=cpu_group)
    time.sleep(STEP_S)


for step in range(STEPS):
    train_step(step)
open(os.path.join(MARK_DIR, f"done_{rank}"), "w").write(str(time.time()))
os._exit(0)  # a Python backend's teardown at exit aborts in torch 2.15: not what is tested here
