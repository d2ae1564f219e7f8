"""A gloo rank that starts child Python processes, as real trainers do.

Each rank reads its batches through a DataLoader with a spawned worker (a fresh interpreter that
imports torch, so torch.distributed, and inherits RANK, LOCAL_RANK and torchelastic's variables)
and starts a subprocess that imports torch.distributed and lives CHILD_S seconds (a compile
worker, a checkpoint uploader). Neither is a rank. Writes $MARK_DIR/pid_<rank> (the rank's pid)
and $MARK_DIR/done_<rank> after STEPS steps; then holds HOLD_S seconds.
"""

import os
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("STEPS", "60"))
STEP_S = float(os.environ.get("STEP_S", "0.1"))
CHILD_S = float(os.environ.get("CHILD_S", "3"))
MARK_DIR = os.environ.get("MARK_DIR", "/tmp")


class Batches(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(64) * i


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(minutes=10))
    rank = dist.get_rank()
    with open(os.path.join(MARK_DIR, f"pid_{rank}"), "w") as f:
        f.write(str(os.getpid()))
    loader = iter(DataLoader(Batches(), batch_size=None, num_workers=1, multiprocessing_context="spawn",
                             persistent_workers=True))
    child = subprocess.Popen([sys.executable, "-c", f"import time, torch.distributed; time.sleep({CHILD_S})"])
    for _ in range(STEPS):
        dist.all_reduce(next(loader))
        time.sleep(STEP_S)
    child.wait()
    with open(os.path.join(MARK_DIR, f"done_{rank}"), "w") as f:
        f.write(str(time.time()))
    time.sleep(float(os.environ.get("HOLD_S", "0")))
    dist.destroy_process_group()


if __name__ == "__main__":  # the spawned DataLoader worker imports this file too
    main()
