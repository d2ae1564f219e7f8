"""The decoder sandbox: long-lived workers, and no decoding without a memory limit unless told to."""

import multiprocessing as mp
import os
import pickle
import sys

import pytest

from frexport.cli.main import main
from frexport.decode import safe_pickle, sandbox
from frexport.decode.sandbox import DecoderPool, Limits, SandboxUnavailable
from tests.support.synth import dump, entry


class _Pid:
    def __call__(self) -> int:
        return os.getpid()


class _Bomb:  # a 9-byte pickle whose memo index asks for 8 GiB
    def __call__(self):
        return safe_pickle.loads_plain(b"\x80\x02Nr\xff\xff\xff\x3f.", "bomb")


def test_workers_live_between_items_and_a_bomb_costs_only_its_item():
    pool = DecoderPool(1, Limits(memory_bytes=512 << 20))
    try:
        first = pool.run(_Pid())
        assert pool.run(_Pid()) == first != os.getpid()  # the same decoder, not a fresh interpreter
        failed = pool.run(_Bomb())
        assert failed.reason == "too_large"
        assert isinstance(pool.run(_Pid()), int)  # still decoding
    finally:
        pool.close()


class _Grow:
    """Keeps 64 MiB in the worker: what a large decode leaves held by the allocator."""

    def __call__(self) -> int:
        globals().setdefault("_held", []).append(bytearray(64 << 20))
        return os.getpid()


def test_a_worker_is_replaced_when_its_memory_grew_not_after_a_count_of_small_items():
    fds = len(os.listdir("/proc/self/fd"))
    pool = DecoderPool(1, Limits(require_memory_limit=False), recycle_after=3, recycle_rss_bytes=48 << 20)
    try:
        pids = {pool.run(_Pid()) for _ in range(10)}  # small items: past recycle_after, the same worker
        assert len(pids) == 1 and pool.started == 1
        assert pool.run(_Grow()) in pids  # this item grew it past the bound: replaced after it
        assert pool.run(_Pid()) not in pids
        for _ in range(3):  # replaced again and again: each one's files (its memory's too) closed with it
            pool.run(_Grow())
        assert pool.started == 4  # (each replacement starts at the next item: bench_jobview.py counts them)
    finally:
        pool.close()
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.fixture
def no_rlimit(monkeypatch):
    """A platform where the address-space limit cannot be set (forked workers see the patch)."""
    monkeypatch.setattr(sandbox, "_set_memory_limit", lambda _: "setrlimit(RLIMIT_AS) failed: not permitted")
    monkeypatch.setattr(sandbox, "_context", lambda: mp.get_context("fork"))


def test_no_memory_limit_refuses_unless_allowed(no_rlimit):
    with pytest.raises(SandboxUnavailable, match="not permitted"):
        DecoderPool(1, Limits()).start()
    pool = DecoderPool(1, Limits(require_memory_limit=False))
    try:
        pool.start()
        assert "not permitted" in pool.limit_problem
        assert isinstance(pool.run(_Pid()), int)
    finally:
        pool.close()


def _dumps(tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    for r in range(2):
        (d / f"trace_{r}").write_bytes(pickle.dumps(dump([entry(1, 1)], world=2), protocol=2))
    return d


def test_serve_and_analyze_refuse_without_a_memory_limit(no_rlimit, tmp_path, capsys):
    d = _dumps(tmp_path)
    assert main(["serve", "--dump-dir", str(d), "--listen", "127.0.0.1:0"]) == 2
    assert "--allow-no-memory-limit" in capsys.readouterr().err
    assert main(["analyze", str(d)]) == 2
    assert "cannot bound the decoders' memory" in capsys.readouterr().err
    assert main(["analyze", str(d), "--raw"]) == 2
    assert main(["analyze", str(d), "--allow-no-memory-limit", "--workers", "1"]) == 0
    assert "WITHOUT a memory limit" in capsys.readouterr().out


def test_analyze_raw_never_unpickles_in_its_own_process(tmp_path, monkeypatch, capsys):
    d = _dumps(tmp_path)
    parent, real = os.getpid(), safe_pickle._PlainDataUnpickler

    def guarded(stream):
        assert os.getpid() != parent, "unpickled in frexport's own process"
        return real(stream)

    monkeypatch.setattr(safe_pickle, "_PlainDataUnpickler", guarded)
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    assert main(["analyze", str(d), "--raw", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "rank 0:" in out and "rank 1:" in out and "all_reduce" in out, out
