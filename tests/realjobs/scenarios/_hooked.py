"""Imported by the hooked_* scenarios (torch >= 2.15): groups on the `asyncstore` backend, which torch
records through its `FlightRecorderHook` into a recorder named `asyncstore`, and a worker server that
serves every recorder.

The server is PyTorch's worker server on <FR_SOCKET_DIR>/rank-<RANK>.sock, with its own handlers
(`fr_trace_json?backend=NAME`, `fr_dump_file?backend=NAME`, `dump_traceback`) and one of ours:
`fr_trace_pickle?backend=NAME`, the pickle dump with stack frames of that recorder (gloo's without it).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import _async_backend  # noqa: E402  (this folder is on sys.path: the scenario runs from it)
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map

c10d = torch._C._distributed_c10d
BACKEND = _async_backend.NAME
# The split-group scenario's second device: nothing but a CPU is here, and a PrivateUse1 tensor is the
# one non-CPU tensor whose c10d op reaches a registered backend through Ops.cpp's kernel (and the hook).
SPLIT_DEVICE = "privateuseone"


def start_server() -> object:
    path = os.path.join(os.environ["FR_SOCKET_DIR"], f"rank-{os.environ['RANK']}.sock")
    if os.path.exists(path):
        os.unlink(path)

    def pickle_handler(req, resp) -> None:
        backend = req.get_param("backend") or "gloo"
        resp.set_content(c10d._dump_fr_trace(backend=backend), "application/octet-stream")
        resp.set_status(200)

    c10d._register_handler("fr_trace_pickle", pickle_handler)
    return c10d._WorkerServer(path)


def init(backend: str = BACKEND, devices: tuple[str, ...] = ("cpu",)) -> tuple[int, int, object]:
    """init_process_group(backend) with asyncstore registered for `devices`; (rank, world, server)."""
    _async_backend.register(devices)
    dist.init_process_group(backend, timeout=timedelta(minutes=30))
    server = start_server()
    return dist.get_rank(), dist.get_world_size(), server


def stuck(where: str) -> None:
    """This rank's host code never returns (a data loader, say); say so on stderr for the capture's log."""
    print(f"rank {dist.get_rank()}: stuck {where}", file=sys.stderr, flush=True)
    while True:
        time.sleep(1)


def hold() -> None:
    """Stay alive (and answering) until the capture kills the job."""
    while True:
        time.sleep(1)


class DeviceTensor(torch.Tensor):
    """A CPU tensor tagged as a PrivateUse1 ("privateuseone") device tensor: a stand-in for a GPU tensor on
    this CPU-only machine. c10d ops on it run Ops.cpp's PrivateUse1 kernel, which serves them with the
    group's backend for that device (asyncstore); every other op runs on the CPU tensor inside."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> "DeviceTensor":
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), dtype=elem.dtype, device=SPLIT_DEVICE)
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "c10d":  # past the Python key: Ops.cpp's kernel for the tensor's device
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
                return func(*args, **kwargs)
        unwrap = lambda x: x.elem if isinstance(x, DeviceTensor) else x  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        return tree_map(lambda x: DeviceTensor(x) if isinstance(x, torch.Tensor) else x, out)


__all__ = ["init", "hold", "stuck", "torch", "dist", "DeviceTensor", "BACKEND", "SPLIT_DEVICE"]
