"""A hang the recorder cannot see (issue 27, class 1), on a real torch 2.13 gloo job: a 4-stage
pipeline in which stage 2 sends its activations to stage 0 instead of 3. gloo records no send/recv,
so the dumps look like a healthy job; the stacks captured beside them show every rank blocked in
send or recv. With py-spy's arguments the send/recv wait graph names the culprit; with faulthandler's
text alone (no peers) the verdict is inconclusive, saying where every rank waits."""

import json
import shutil

from hypothesis import given
from hypothesis import strategies as st

from frexport.decode.stacks import parse_pyspy, read_stack_dir
from tests.support import paths
from tests.support.filetimes import copies

SRC = paths.REAL_FIXTURES / "p2p_wrong_peer"
WHERE = {0: "recv", 1: "recv", 2: "send", 3: "recv"}


def _same(diagnose, src, tmp_path):
    out = [diagnose(d) for _, d in copies(src, tmp_path)]
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out}) == 1
    return out[0]


def _only(d):
    assert len(d.findings) == 1, [(f.kind, f.message) for f in d.findings]
    return d.findings[0]


def test_the_recorder_alone_cannot_see_it(diagnose):
    """The JSON twins alone (no stacks): every recorded collective completed. What the data cannot
    decide without stacks; docs/diagnosis.md says so."""
    assert diagnose(SRC / "json").verdict == "healthy"


def test_stacks_with_peers_name_the_rank_that_sent_to_the_wrong_peer(diagnose, tmp_path):
    f = _only(_same(diagnose, SRC, tmp_path))
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.op, f.certain) == ("unmatched_p2p", (2,), (0, 1, 3), "send",
                                                                            True)
    assert f.message.startswith("rank 2 sends to rank 0, which waits for another rank, while ranks 1, 3 wait to "
                                "receive from rank 2")
    assert f.call_site.endswith("p2p_wrong_peer.py:17 forward")
    assert "none can move" in f.reason
    assert [line.split(" at ")[0] for line in f.details[:4]] == [
        "rank 0 waits in torch.distributed recv (from rank 1)", "rank 1 waits in torch.distributed recv (from rank 2)",
        "rank 2 waits in torch.distributed send (to rank 0)", "rank 3 waits in torch.distributed recv (from rank 2)"]


def test_faulthandler_stacks_alone_say_where_every_rank_waits(diagnose, tmp_path):
    """PyTorch's dump_traceback names no peer: inconclusive, never healthy, every rank's wait listed."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    for p in (src / "stacks").glob("*.pyspy_dump.txt"):
        p.unlink()
    d = _same(diagnose, src, tmp_path / "v")
    f = _only(d)
    assert d.verdict == "inconclusive" and not f.certain
    assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("unmatched_p2p", (), (0, 1, 2, 3))
    assert "who is at fault the stacks do not say" in f.message
    for r, call in WHERE.items():
        assert any(line.startswith(f"rank {r} waits in torch.distributed {call} at ") for line in f.details)


def test_py_spy_dumps_alone_are_read(diagnose, tmp_path):
    """Only py-spy's output beside the dumps (its file names are relative: torch/distributed/...)."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    for r in range(4):
        (src / "stacks" / f"rank_{r}.txt").unlink()
    f = _only(_same(diagnose, src, tmp_path / "v"))
    assert (f.culprit_ranks, f.certain) == ((2,), True)
    assert f.call_site == "p2p_wrong_peer.py:17 forward"


def test_py_spy_text_is_parsed_not_evaluated():
    frames, args = parse_pyspy((SRC / "stacks" / "rank_2.pyspy_dump.txt").read_text())
    assert frames[0][0].name == "send" and args[0][0]["dst"] == "0"
    assert frames[0][-1].name == "<module>"
    _, calls = read_stack_dir(str(SRC))
    assert {r: (c, a.get("src", a.get("dst"))) for r, (c, a) in calls.items()} == {
        0: ("recv", "1"), 1: ("recv", "2"), 2: ("send", "0"), 3: ("recv", "2")}


@given(st.text(max_size=2000))
def test_any_text_parses_to_frames_or_nothing(text):
    """The stacks come from the ranks (or a person's paste): any text gives frames and arguments, or
    none, and never runs anything."""
    frames, args = parse_pyspy(text)
    assert len(frames) == len(args) and all(len(f) == len(a) for f, a in zip(frames, args))


def test_a_thread_header_line_of_py_spy_variants_is_read():
    text = ('Thread 0x7F4A1C2D3740 (active+gil): "MainThread"\n    recv (torch/distributed/distributed_c10d.py:2799)\n'
            "        Arguments:\n            src: 3\n    <module> (train.py:9)\n"
            'Thread 4242 (idle): "Thread-1"\n    wait (threading.py:320)\n')
    frames, args = parse_pyspy(text)
    assert [f[0].name for f in frames] == ["recv", "wait"] and args[0][0] == {"src": "3"}


def test_stacks_are_found_by_what_they_are_not_by_their_name(tmp_path):
    """A user saves each rank's stacks beside the dumps under names of their own (curl of PyTorch's
    dump_traceback into stacks_<rank>.txt, py-spy into host names): they are read, the same diagnosis
    as from the bundle's names; a stack dump whose name holds no rank is noted with how to name it; a
    log beside them is not a stack."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    for p in SRC.glob("trace_*"):
        shutil.copy2(p, src / p.name)
    for r in range(4):
        shutil.copy2(SRC / "stacks" / f"rank_{r}.txt", src / f"stacks_{r}.txt")
        shutil.copy2(SRC / "stacks" / f"rank_{r}.pyspy_dump.txt", src / f"node-a.rank{r}.pyspy.log")
    shutil.copy2(SRC / "stacks" / "rank_0.txt", src / "stacks_unnamed.txt")
    (src / "train_3.log").write_text("epoch 3 loss 0.25\nThread count 4\n")
    out = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(src), "--format", "json"],
                         capture_output=True, text=True, timeout=180)
    doc = json.loads(out.stdout)
    f = doc["findings"][0]
    assert (f["kind"], f["culprit_ranks"], f["certain"]) == ("unmatched_p2p", [2], True), doc
    text = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(src), "--verbose"], capture_output=True,
                          text=True, timeout=180).stdout
    assert "stacks_unnamed.txt: a Python stack dump whose name holds no rank number" in text, text
    assert "name it stacks_<rank>.txt" in text
    assert "stacks_1.txt" not in text and "train_3.log" in text  # read, not "skipped"; the log is skipped
