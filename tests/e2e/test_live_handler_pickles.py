"""The agent's live-poll handler (frexport/agent/live.py) on real PyTorch Flight Recorder pickles: a real
gloo job (torch in a subprocess) records them, so these run in the e2e tier. The handler's parts that
need no recorder are tested in tests/unit/agent/test_live.py."""

import json
import os
import pickle
import subprocess
import sys

import pytest

from frexport.agent import live
from frexport.decode import scanned
from frexport.decode.json_decode import parse_tail
from frexport.decode.normalize import normalize
from frexport.decode.pickle_tail import parse_pickle_tail
from tests.support.ports import free_port
from tests.support.torchjob import torch_envs

# Two groups, a dtype first seen in the middle of the buffer (a string the pickle writes once, there),
# 300 entries of which the buffer keeps the newest 250.
_RECORDER = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
side = dist.new_group([0])
t = torch.ones(8)
for i in range(300):
    dist.all_reduce(t)
    if i % 7 == 0:
        dist.broadcast(t, 0, group=side)
    if i == 200:
        dist.all_reduce(t.to(torch.bfloat16))
open(sys.argv[1], "wb").write(torch._C._distributed_c10d._dump_fr_trace(True, False, False))
dist.destroy_process_group()  # (left to the interpreter's exit, torch 2.15's teardown aborted once in a full run)
"""


def _record(out, python: str) -> bytes:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               TORCH_FR_BUFFER_SIZE="250", OMP_NUM_THREADS="1")
    proc = subprocess.run([python, "-c", _RECORDER, str(out)], env=env, timeout=120, capture_output=True, text=True)
    assert proc.returncode == 0, f"the recording job exited {proc.returncode}: {proc.stderr[-2000:]}"
    return out.read_bytes()


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> bytes:
    pytest.importorskip("torch")
    return _record(tmp_path_factory.mktemp("fr") / "dump.pkl", sys.executable)


@pytest.fixture(scope="module", params=sorted(torch_envs()))
def each_build(request, tmp_path_factory) -> bytes:
    """The same recording on every torch build installed (.torch/<version>)."""
    return _record(tmp_path_factory.mktemp("fr") / "dump.pkl", str(torch_envs()[request.param] / "python"))


def _answer(dump: bytes, after: int | None) -> dict:
    return json.loads(live.live_dump(lambda *flags: dump, after))


@pytest.mark.torchjob
def test_the_answer_is_the_dump_from_the_cursor_on(dump):
    full = pickle.loads(dump)
    rids = [e["record_id"] for e in full["entries"]]
    first, last = rids[0], rids[-1]
    bf16 = next(e["record_id"] for e in full["entries"] if "BFloat16" in e["input_dtypes"])
    for after in (None, first, first + 1, first + 2, bf16 - 1, bf16, bf16 + 1, last - 99, last - 1, last, last + 1):
        got = _answer(dump, after)
        want = [e for e in full["entries"] if after is None or e["record_id"] >= after]
        assert got["entries"] == json.loads(json.dumps(want)), after  # every field, as JSON has it
        assert got[live.FIRST_RECORD_KEY] == first  # the sidecar keeps its older entries from here on
        assert (got["version"], got["pg_status"]) == (full["version"], json.loads(json.dumps(full["pg_status"])))
        assert "frames" not in json.dumps(got["entries"])


@pytest.mark.torchjob
def test_entries_before_the_cursor_are_not_loaded(dump):
    # what makes the poll cheap: the 150 entries before the cursor are cut from the pickle before it
    # is loaded, except the first and the ones that write a string for the first time
    last = pickle.loads(dump)["entries"][-1]["record_id"]
    loaded = live._load_from(dump, last - 99)
    assert loaded is not None and 100 < len(loaded["entries"]) < 110


@pytest.mark.torchjob
def test_a_pickle_it_cannot_cut_is_loaded_whole(dump):
    last = pickle.loads(dump)["entries"][-1]["record_id"]
    # the layout it relies on is not there (here: the first entry's key written differently)
    renamed = dump.replace(b"X\x09\x00\x00\x00record_id", b"X\x09\x00\x00\x00record_ix")
    assert live._load_from(renamed, last) is None
    # a cut whose result does not hold the cursor's entry where it should: refused too
    assert live._load_from(dump, last + 1) is None


def _normalized(tail, fmt: str):
    raw = dict(tail.meta)
    raw.pop(live.FIRST_RECORD_KEY, None)
    raw["entries"] = tail.entries
    return normalize(raw, "rank-0", fmt, rank=0, keep_frames=False)


@pytest.mark.torchjob
@pytest.mark.skipif(not scanned.available(), reason="the pickle answer is read by the compiled scanner only")
def test_the_pickle_answer_reads_as_the_json_answer(each_build):
    # what the sidecar asks for where its scanner is built: the pickle with the old entries cut out of
    # its bytes, nothing loaded in the trainer; read, it must give the very entries the JSON answer gives
    full = pickle.loads(each_build)
    rids = [e["record_id"] for e in full["entries"]]
    first, last = rids[0], rids[-1]
    bf16 = next(e["record_id"] for e in full["entries"] if "BFloat16" in e["input_dtypes"])
    for after in (first, first + 1, bf16 - 1, bf16, bf16 + 1, last - 99, last - 1, last):
        body = live.live_dump(lambda *flags: each_build, after, "pickle")
        assert len(body) < len(each_build) or after <= first + 1, after  # the old entries are not sent
        got = parse_pickle_tail(body, after)
        want = parse_tail(live.live_dump(lambda *flags: each_build, after), after)
        assert got is not None and want is not None, after
        assert got.first_record == first and got.first_created == want.first_created
        a, b = _normalized(got, "pickle"), _normalized(want, "json")
        assert a.entries == b.entries and [e.record_id for e in a.entries] == rids[rids.index(after):], after
        assert (a.pg_config, a.pg_status, a.version_text) == (b.pg_config, b.pg_status, b.version_text)
    # the cursor gone from the buffer: the whole pickle comes, and no tail is made of it
    assert live.live_dump(lambda *flags: each_build, first - 1, "pickle") == each_build
    assert parse_pickle_tail(each_build, first - 1) is None
    # a cut that landed wrong (an entry missing after the cursor) is refused, never read short
    body = live.live_dump(lambda *flags: each_build, last - 10, "pickle")
    entry = body.rfind(b"}(", 0, body.rfind(b"}("))
    assert parse_pickle_tail(body[:entry] + body[body.rfind(b"}("):], last - 10) is None
