"""The native frame a rank waits in, from real captures: rank 1 of a torch 2.13 gloo job waits in an
all_reduce its peer never joins (tests/jobs/train_loader.py, WAIT_RANK=1), rank 0 sleeps in Python;
each taken with py-spy 0.4.3 (`dump --native`) and gdb (`thread apply all bt`)."""

import pytest

from frexport.analysis.native_wait import native_wait
from frexport.decode.native_stacks import parse
from tests.support.paths import REAL_FIXTURES

DIR = REAL_FIXTURES / "native_stacks"
PIDS = {0: 1719, 1: 1720}


def _read(tool, rank, pid=True):
    return parse((DIR / f"{tool}_{rank}.txt").read_text(), PIDS[rank] if pid else None)


@pytest.mark.parametrize("tool", ["gdb", "pyspy"])
def test_the_rank_in_the_collective_waits_in_c10d_work_wait(tool):
    stacks = _read(tool, 1)
    assert stacks.tool == ("gdb" if tool == "gdb" else "py-spy")
    w = native_wait(stacks)
    assert w is not None
    assert (w.frame, w.library, w.primitive) == ("c10d::Work::wait", "libtorch_cpu.so", "pthread_cond_wait")


def test_py_spy_also_names_the_python_call_above_it():
    w = native_wait(_read("pyspy", 1))
    assert w is not None and w.python == "all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert w.text() == ("c10d::Work::wait (libtorch_cpu.so, in pthread_cond_wait) under "
                        "all_reduce (torch/distributed/distributed_c10d.py:3252)")


@pytest.mark.parametrize("tool", ["gdb", "pyspy"])
def test_a_rank_sleeping_in_python_waits_in_no_torch_frame(tool):
    assert native_wait(_read(tool, 0)) is None


def test_gdb_shows_every_thread_and_the_main_one_by_its_pid():
    stacks = _read("gdb", 1)
    assert len(stacks.threads) == 13
    assert [t.tid for t in stacks.threads if t.main] == [1720]
    # gloo's own thread waits in its transport: there for the reader, not what the main thread waits in
    assert any(f.function == "gloo::transport::tcp::UnboundBuffer::waitRecv" for t in stacks.threads
               for f in t.frames)


def test_gdb_s_thread_1_is_the_main_one_without_a_pid():
    assert native_wait(_read("gdb", 1, pid=False)) is not None


def test_the_sidecar_s_header_names_the_pid():
    text = "# native stacks of rank 1 (pid 1720) by gdb: gdb -p 1720 at X\n" + (DIR / "gdb_1.txt").read_text()
    assert parse(text).main is not None and parse(text).main.tid == 1720


@pytest.mark.parametrize("text", ["", "garbage\n" * 1000, "Thread 1 (\n#0 \n", "\x00\xff" * 100])
def test_anything_else_gives_no_threads_or_no_frame(text):
    assert native_wait(parse(text)) is None
