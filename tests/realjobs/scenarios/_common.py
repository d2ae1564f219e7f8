import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _rank_server  # noqa: E402


def init():
    dist.init_process_group("gloo", timeout=timedelta(minutes=30))
    server = _rank_server.start()
    return dist.get_rank(), dist.get_world_size(), server


def hold():
    _rank_server.hold()


def wait_dumped():
    _rank_server.wait_dumped()


__all__ = ["init", "hold", "wait_dumped", "torch", "dist"]
