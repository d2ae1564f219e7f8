"""A rank's last error line, as the finding that names it quotes it (analysis/last_words.py)."""

from frexport.analysis.findings import Diagnosis, Finding
from frexport.analysis.last_words import LastWords, last_error, with_last_words
from frexport.analysis.report import render_text

RING = "[node7:3] 2026-05-01T12:03:07.412Z {stream}| {line}"


def _ring(*lines, stream="err"):
    return "".join(RING.format(stream=stream, line=line) + "\n" for line in lines)


def test_the_final_line_of_a_traceback_torch_prefixed_with_its_rank():
    text = _ring("rank 3 step 4", stream="out") + _ring(
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "train.py", line 30, in train_step',
        '[rank3]:     raise RuntimeError(f"loss is NaN at step {step}")',
        "[rank3]: RuntimeError: loss is NaN at step 5",
        "[rank3]:[W1129 04:44:59.206132359 WorkerServer.cpp:144] [c10d] Server shutting down")
    assert last_error(text) == LastWords("RuntimeError: loss is NaN at step 5", "2026-05-01T12:03:07.412Z")


def test_the_kinds_of_last_words():
    assert last_error("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n").line.startswith(
        "torch.OutOfMemoryError: CUDA out of memory")
    assert last_error("  File \"x.py\", line 3, in f\n    assert loss > 0\nAssertionError\n").line == "AssertionError"
    assert last_error("terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error\n"
                      ).line == "what():  CUDA error"
    assert last_error("Fatal Python error: Segmentation fault\n").line == "Fatal Python error: Segmentation fault"
    # chained: the exception Python printed last
    assert last_error("ValueError: bad batch\n\nDuring handling of the above exception, another exception "
                      "occurred:\n\ntorch.distributed.DistBackendError: NCCL error\n").line.startswith(
        "torch.distributed.DistBackendError")


def test_no_error_no_quote():
    assert last_error("UserWarning: this is deprecated\nstep 5 loss 0.3\n    raise RuntimeError('x')\n") is None
    assert last_error("") is None


def test_a_hostile_line_is_bounded_and_shows_no_control_characters():
    words = last_error("RuntimeError: \x1b[31mred" + "x" * 5000 + "\n")
    assert "\x1b" not in words.line and len(words.line) <= 405 and words.line.endswith(" ...")


def _finding(root: bool):
    return Finding("missing_rank", "0", "default_pg", 5, (3,), (0, 1, 2), "all_reduce", None,
                   "rank 3 left the job", root_cause=root)


def test_root_causes_quote_their_culprits_and_the_report_shows_it():
    words = {3: LastWords("RuntimeError: loss is NaN at step 5", "2026-05-01T12:03:07.412Z"),
             1: LastWords("ValueError: not a culprit", None)}
    root, other = with_last_words([_finding(True), _finding(False)], words)
    assert root.last_words == ((3, "RuntimeError: loss is NaN at step 5", "2026-05-01T12:03:07.412Z"),)
    assert other.last_words == ()
    assert root.to_json()["last_error_lines"] == {"3": {"line": "RuntimeError: loss is NaN at step 5",
                                                         "at": "2026-05-01T12:03:07.412Z"}}
    text = render_text(Diagnosis([0, 1, 2, 3], [root]))
    assert ("   last error line of rank 3 (printed 2026-05-01T12:03:07.412Z): RuntimeError: loss is NaN at step 5"
            in text.splitlines())
