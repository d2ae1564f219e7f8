"""The job bundle's summary: where the ranks are, grouped, and the line a culprit hangs on."""

from frexport.decode.normalize import normalize
from frexport.export.job_evidence import hang_line, where_ranks
from tests.support.synth import dump, entry

TRACEBACK = '''Thread 0x00007f00000002 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
  File "/venv/lib/python3.12/site-packages/frexport/agent/__init__.py", line 230 in _snapshots
  File "/usr/lib/python3.12/threading.py", line 1012 in run

Current thread 0x00007f00000001 (most recent call first):
  File "/job/data.py", line 210 in next_batch
  File "/job/train.py", line 41 in load_batch
  File "/job/train.py", line 47 in train_step
  File "/job/train.py", line 52 in <module>
'''


def test_hang_line_is_the_scripts_innermost_user_frame():
    assert hang_line(TRACEBACK) == "/job/data.py:210 next_batch"
    assert hang_line('  File "/venv/lib/python3.12/site-packages/torch/x.py", line 3, in f\n') is None
    assert hang_line("") is None


def _d(rank, entries, frames=True):
    return normalize(dump(entries, world=4), f"rank {rank}", "pickle", rank=rank, keep_frames=frames)


def test_ranks_grouped_by_where_they_are():
    done = [entry(i, i + 1) for i in range(5)]
    waiting = done + [entry(5, 6, state="scheduled", duration_ms=None, line=88)]
    dumps = {r: _d(r, waiting, frames=False) for r in range(3)} | {3: _d(3, done, frames=False)}
    framed = {0: _d(0, waiting)}
    lines = where_ranks(dumps, framed, {3: {"traceback": TRACEBACK}}, {3})
    assert lines[0].startswith("3 ranks (0-2) wait in all_reduce (collective 6 of group 0 (default_pg)) at "
                               "/job/train.py:88"), lines
    assert lines[1] == ("rank 3: after all_reduce (collective 5 of group 0 (default_pg)), now at "
                        "/job/data.py:210 next_batch"), lines
