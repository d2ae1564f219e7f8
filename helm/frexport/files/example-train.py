"""frexport chart example: a minimal DDP-style loop (one all_reduce per step) for torchrun.

EXAMPLE_STALL_RANK / EXAMPLE_STALL_AT_STEP make one rank stop issuing collectives, so its peers hang
in the next all_reduce and frexport names the culprit (FrexportRankStalled).
"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    backend = os.environ.get("EXAMPLE_BACKEND", "gloo")
    steps = int(os.environ.get("EXAMPLE_STEPS", "3000"))
    stall_rank = int(os.environ.get("EXAMPLE_STALL_RANK", "-1"))
    stall_at = int(os.environ.get("EXAMPLE_STALL_AT_STEP", "100"))
    step_seconds = float(os.environ.get("EXAMPLE_STEP_SECONDS", "0.1"))
    dist.init_process_group(backend=backend)
    rank = dist.get_rank()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    grad = torch.ones(1 << 16, device=device)
    for step in range(steps):
        if rank == stall_rank and step == stall_at:
            print(f"rank {rank}: stalling at step {step} (EXAMPLE_STALL_RANK)", flush=True)
            while True:
                time.sleep(60)
        dist.all_reduce(grad)
        grad.div_(dist.get_world_size())
        time.sleep(step_seconds)
        if rank == 0 and step % 100 == 0:
            print(f"step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
