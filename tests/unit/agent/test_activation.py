"""Which processes the agent acts in, and whose socket it may take (frexport.agent)."""

import json
import os
import subprocess
import sys

import pytest

import frexport.agent as agent


@pytest.fixture
def env(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", agent.ENV_RANK_PID):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_rank_started_by_a_launcher_is_one(env):
    env.setenv("RANK", "3")
    env.setenv("LOCAL_RANK", "1")
    assert agent.rank_process() == 3


def test_a_child_of_a_rank_is_none(env):
    env.setenv("RANK", "3")
    env.setenv("LOCAL_RANK", "1")
    env.setenv(agent.ENV_RANK_PID, str(os.getppid()))  # inherited from the rank that started it
    assert agent.rank_process() is None


def test_the_rank_itself_after_marking_is_still_one(env):
    env.setenv("RANK", "0")
    env.setenv(agent.ENV_RANK_PID, str(os.getpid()))
    assert agent.rank_process() == 0


@pytest.mark.parametrize("rank", [None, "", "-1", "x"])
def test_no_usable_rank_is_none(env, rank):
    if rank is not None:
        env.setenv("RANK", rank)
    assert agent.rank_process() is None


def _meta(tmp_path, rank, **fields):
    (tmp_path / f"rank-{rank}.json").write_text(json.dumps(fields))


def test_a_live_owner_keeps_its_socket(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _meta(tmp_path, 0, pid=proc.pid, pid_start=agent._proc_stat(proc.pid)[1])
        assert agent.socket_owner(str(tmp_path), 0) == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert agent.socket_owner(str(tmp_path), 0) is None  # gone: its socket is stale


def test_a_killed_unreaped_owner_is_gone(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while agent._proc_stat(proc.pid)[0] != "Z":  # exited, not waited for: a zombie
            os.sched_yield()
        _meta(tmp_path, 1, pid=proc.pid)
        assert agent.socket_owner(str(tmp_path), 1) is None
    finally:
        proc.wait()


def test_a_reused_pid_is_not_the_owner(tmp_path):
    # A restarted container shares the volume: the old rank's pid now names another process.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _meta(tmp_path, 2, pid=proc.pid, pid_start=agent._proc_stat(proc.pid)[1] - 1)
        assert agent.socket_owner(str(tmp_path), 2) is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("content", ["", "not json", '{"pid": "12"}', '{"pid": -1}', "[1]"])
def test_unreadable_metadata_names_no_owner(tmp_path, content):
    (tmp_path / "rank-0.json").write_text(content)
    assert agent.socket_owner(str(tmp_path), 0) is None


def test_own_pid_is_no_other_owner(tmp_path):
    _meta(tmp_path, 0, pid=os.getpid())
    assert agent.socket_owner(str(tmp_path), 0) is None


_LOST_UPDATES = r"""
import ctypes, sys, weakref
from frexport.agent import _never_freed

class Handler:
    def __call__(self, req, resp): ...

handler = Handler()
alive = weakref.ref(handler)
_never_freed(handler)
decref = ctypes.pythonapi.Py_DecRef
decref.argtypes = [ctypes.c_void_p]
for lost in range(1000):  # as many decrements lost their increments: the object is freed at zero
    if alive() is None:
        print(f"freed after {lost} lost updates", flush=True)
        import os; os._exit(0)  # at once: `handler` now names freed memory
    decref(id(handler))
print("alive", flush=True)
"""


def test_a_handler_the_agent_registers_survives_reference_counts_lost_without_the_gil():
    # PyTorch's worker server changes a Python handler's reference count on its own threads without
    # the GIL, and concurrent requests lose updates (the real race, in a real job: tests/e2e/
    # test_agent.py). Here the lost updates are made directly, in a process of its own.
    out = subprocess.run([sys.executable, "-c", _LOST_UPDATES], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "alive", out.stdout + out.stderr
