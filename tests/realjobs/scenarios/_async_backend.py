"""`asyncstore`: a real ASYNCHRONOUS out-of-tree c10d backend on the rendezvous store, the way NCCL behaves.

Each op posts this rank's part under `<seq>/<rank>` and returns at once a Work wrapping a future; one
worker thread per backend instance (a queue, ops in issue order) completes the future once every
member has posted its part. So `dist.all_reduce(t)` returns from the backend call at once (torch 2.15's
`FlightRecorderHook` retires the entry there: a Python backend has no completion hook) and then blocks
in `work.wait()` until the peers come: the entry is retired while the rank waits, as with nccl2 ops
whose completion hook never fires... except that here nothing ever marks them completed.

Keys need no prefix of ours: torch hands each backend a `PrefixStore("<device>/", PrefixStore("<group
name>/", store))`, so groups (and the device backends of one group) never share a key.

Disagreements between ranks, chosen to be the simplest NCCL-like behaviour:
- sizes: copied/summed over the elements both sides hold (silent corruption, like NCCL); completes;
- op kind or broadcast root: the future is never completed (NCCL ranks that disagree on the
  collective wait forever); a line on stderr says so;
- a peer that never posts: the future fails after the group's timeout (the store wait's).

Used by tests/realjobs/scenarios/hooked_*.py and tests/jobs/train_hooked_async.py (one copy).
"""

from __future__ import annotations

import pickle
import queue
import sys
import threading
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

c10d = torch._C._distributed_c10d
NAME = "asyncstore"

Part = tuple[str, int, list]  # (op, root or -1, this rank's tensors)
Finish = Callable[[list[list[torch.Tensor]]], object]  # every rank's tensors -> the future's value


def _local(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor holding t's data: t itself, or the `elem` of a device-tagged wrapper (the split-group
    scenario's stand-in for a GPU tensor, _hooked.DeviceTensor), whose own views would not alias it."""
    return getattr(t, "elem", t)


def _fill(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src over the elements both hold (a size mismatch corrupts silently, as NCCL does)."""
    n = min(dst.numel(), src.numel())
    dst.view(-1)[:n].copy_(src.reshape(-1)[:n].to(dst.dtype))


class AsyncStoreBackend(c10d.Backend):
    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self.store, self.me, self.size, self.timeout = store, rank, size, timeout
        self.seq = 0
        self.jobs: queue.Queue = queue.Queue()
        # daemon: a rank that exits (os._exit) must not wait for a peer that never posts
        threading.Thread(target=self._work, name=f"{NAME}-worker", daemon=True).start()

    def getBackendName(self) -> str:
        return NAME

    # -- the ops: post this rank's part, return a Work the worker completes ---------------------------
    def _issue(self, op: str, root: int, tensors: list, finish: Finish):
        self.seq += 1
        tensors = [_local(t) for t in tensors]
        self.store.set(f"{self.seq}/{self.me}", pickle.dumps((op, root, [t.detach().clone() for t in tensors])))
        fut = torch.futures.Future()
        self.jobs.put((self.seq, op, root, finish, fut))
        return c10d._create_work_from_future(fut)

    def allreduce(self, tensors, opts=None):
        def finish(parts):
            for i, t in enumerate(map(_local, tensors)):
                total = torch.zeros_like(t)
                for p in parts:
                    view = total.view(-1)[: p[i].numel()]
                    view += p[i].reshape(-1)[: view.numel()].to(t.dtype)
                t.copy_(total)
            return tensors
        return self._issue("all_reduce", -1, tensors, finish)

    def allgather(self, output_tensors, input_tensors, opts=None):
        def finish(parts):
            for i, outs in enumerate(output_tensors):
                for r, out in enumerate(outs):
                    _fill(_local(out), parts[r][i])
            return output_tensors
        return self._issue("all_gather", -1, input_tensors, finish)

    def all_gather_single(self, output, input, opts=None):  # all_gather_into_tensor (2.15's name)
        def finish(parts):
            for r, chunk in enumerate(_local(output).chunk(self.size)):
                _fill(chunk, parts[r][0])
            return [output]
        return self._issue("all_gather_into_tensor", -1, [input], finish)

    _allgather_base = all_gather_single  # the name before 2.15

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def finish(parts):
            for i, t in enumerate(tensors):
                _fill(_local(t), parts[root][i])
            return tensors
        return self._issue("broadcast", root, tensors, finish)

    def barrier(self, opts=None):
        return self._issue("barrier", -1, [], lambda parts: [])

    # -- the worker: one op at a time, in issue order ---------------------------------------------------
    def _work(self) -> None:
        while True:
            seq, op, root, finish, fut = self.jobs.get()
            try:
                parts: list[Part] = []
                for r in range(self.size):
                    self.store.wait([f"{seq}/{r}"], self.timeout)  # bounded by the group's timeout
                    parts.append(pickle.loads(self.store.get(f"{seq}/{r}")))
            except Exception as exc:  # noqa: BLE001 - a peer never came: fail the op, as NCCL's watchdog would
                fut.set_exception(exc)
                continue
            kinds = {(p[0], p[1]) for p in parts}
            if len(kinds) > 1:
                print(f"{NAME}: rank {self.me} seq {seq}: members disagree on the collective {sorted(kinds)}; "
                      "it never completes", file=sys.stderr, flush=True)
                continue  # never completed: every member waits forever
            try:
                fut.set_result(finish([p[2] for p in parts]))
            except Exception as exc:  # noqa: BLE001
                fut.set_exception(exc)


def register(devices: tuple[str, ...] = ("cpu",)) -> None:
    """Make `asyncstore` a backend name for `init_process_group` / `new_group` (once per process)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, lambda store, rank, size, timeout: AsyncStoreBackend(
            store, rank, size, timeout), devices=list(devices))
