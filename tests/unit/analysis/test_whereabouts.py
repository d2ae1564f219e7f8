"""Where a rank is now, from the stacks a real stuck gloo job saved (tests/fixtures/real/*/stacks)."""

from frexport.analysis.whereabouts import describe, place, places
from frexport.decode.stacks import parse_traceback, read_stacks
from tests.support.paths import REAL_FIXTURES

STUCK = REAL_FIXTURES / "stuck_before_collective"


def test_the_culprit_is_outside_any_collective_its_peers_inside_all_reduce():
    where = places(read_stacks(str(STUCK)))
    assert where[2].endswith("stuck_before_collective.py:12 load_batch, outside any collective")
    assert all(where[r].endswith("stuck_before_collective.py:18 train_step, inside torch.distributed all_reduce")
               for r in (0, 1, 3))
    lines = describe([0, 1, 2, 3], where)
    assert len(lines) == 2 and lines[0].startswith("ranks 0, 1, 3 are in ") and lines[1].startswith("rank 2 is in ")


def test_the_callee_names_the_c_function_the_stack_cannot_show():
    threads = read_stacks(str(STUCK))[2]
    assert place(threads, lambda f: "time.sleep").endswith("load_batch (time.sleep), outside any collective")


def test_the_training_thread_is_the_one_running_the_script():
    text = """Thread 0x0000000000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/job/loader.py", line 40 in prefetch

Current thread 0x0000000000000002 (most recent call first):
  File "/job/train.py", line 8, in load_batch
  File "/job/train.py", line 30, in <module>
"""
    threads = parse_traceback(text)
    assert len(threads) == 2
    assert place(threads) == "/job/train.py:8 load_batch, outside any collective"
    assert place(parse_traceback("Current thread 0x1 (most recent call first):\n  <no Python frame>\n")) is None


def test_frexports_agent_thread_is_never_where_training_is():
    """`python -m pkg.train`: no thread runs `<module>` outermost (runpy does), and faulthandler lists
    the agent's thread, started later, first. The agent is copied in as <dir>/frexport/agent/."""
    text = """Thread 0x0000000000000003 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/shared/frexport/agent/frexport/agent/__init__.py", line 230 in _snapshots
  File "/usr/lib/python3.11/threading.py", line 1012 in run

Thread 0x0000000000000001 (most recent call first):
  File "/job/pkg/train.py", line 8 in load_batch
  File "/job/pkg/train.py", line 30 in main
  File "<frozen runpy>", line 88 in _run_code
  File "<frozen runpy>", line 198 in _run_module_as_main
"""
    assert place(parse_traceback(text)) == "/job/pkg/train.py:8 load_batch, outside any collective"


def test_a_single_threads_traceback_is_read_too():
    """faulthandler without all_threads heads its one thread `Stack (most recent call first):`."""
    text = 'Stack (most recent call first):\n  File "/job/train.py", line 8 in load_batch\n'
    assert place(parse_traceback(text)) == "/job/train.py:8 load_batch, outside any collective"
