"""A gloo training loop whose batches come from a real DataLoader, for the profile and native-stack tests.

STEPS (default: run until killed), LOADER_SLOW_RANK + LOADER_SLOW_S (that rank's Dataset sleeps in
__getitem__: a straggler whose delay is in its data loader), WAIT_RANK + WAIT_STEP (from that step on,
every other rank stays in Python (time.sleep) and WAIT_RANK waits in an all_reduce its peers never
join: a rank stuck in gloo's C++ wait), MARK_DIR (writes started_<rank> after the first step, and
waiting_<rank> when it enters that wait), STEP_LOG (each rank appends "<end time> <seconds>" of every
step to STEP_LOG.<rank>: benchmarks/bench_profile.py), STEP_S (each step also sleeps this long).
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "0"))
SLOW_RANK = int(os.environ.get("LOADER_SLOW_RANK", "-1"))
SLOW_S = float(os.environ.get("LOADER_SLOW_S", "0.2"))
WAIT_RANK = int(os.environ.get("WAIT_RANK", "-1"))
WAIT_STEP = int(os.environ.get("WAIT_STEP", "-1"))
MARK_DIR = os.environ.get("MARK_DIR", "/tmp")
STEP_LOG = os.environ.get("STEP_LOG", "")
STEP_S = float(os.environ.get("STEP_S", "0"))  # host time a step spends outside torch (a GPU's work, I/O)
BATCH = 4

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()


class Samples(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        if rank == SLOW_RANK:
            time.sleep(SLOW_S / BATCH)  # a slow disk under this rank's data loader
        return torch.full((64,), float(i % 7))


def compute(batch, w):
    for _ in range(4):
        batch = torch.tanh(batch @ w)
    return batch


def train_step(batch, w):
    out = compute(batch, w)
    time.sleep(STEP_S)
    grad = out.sum(0)
    dist.all_reduce(grad)
    return grad


def wait_here():
    """The peers never join: this rank waits in gloo's C++ wait, its Python stack ends at all_reduce."""
    open(os.path.join(MARK_DIR, f"waiting_{rank}"), "w").write(str(time.time()))
    dist.all_reduce(torch.ones(8))


def main():
    w = torch.randn(64, 64) / 8
    loader = iter(torch.utils.data.DataLoader(Samples(), batch_size=BATCH, num_workers=0))
    step = 0
    log = open(f"{STEP_LOG}.{rank}", "a", buffering=1) if STEP_LOG else None
    while not STEPS or step < STEPS:
        began = time.time()
        if step == WAIT_STEP:
            if rank == WAIT_RANK:
                wait_here()
            while True:
                time.sleep(0.5)  # stays in Python: the rank its peer waits for
        train_step(next(loader), w)
        if log is not None:
            log.write(f"{time.time():.6f} {time.time() - began:.6f}\n")
        if step == 0:
            open(os.path.join(MARK_DIR, f"started_{rank}"), "w").write(str(time.time()))
        step += 1
    dist.destroy_process_group()


main()
