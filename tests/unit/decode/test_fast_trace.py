"""The analyzer's fast path builds exactly the trace the general path builds (normalize + build)."""

import glob
import json
import pickle
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frexport.decode.fast_trace import trace_from_raw
from frexport.decode.normalize import normalize
from frexport.decode.safe_pickle import loads_plain
from frexport.model.rank_trace import build_rank_trace
from tests.support import paths
from tests.support.examples import examples
from tests.support.synth import dump, entry


def _general(raw, fmt="pickle"):
    return build_rank_trace(normalize(raw, "x", fmt, rank=3, dumped_at_ns=7, size_bytes=11, keep_frames=False))


def _same(raw, fmt="pickle"):
    fast = trace_from_raw(raw, "x", fmt, 3, 7, 11)
    if fast is None:
        return False  # unusual input: the caller takes the general path, nothing to compare
    assert fast == _general(raw, fmt)
    return True


def test_real_and_synthetic_dumps():
    used = 0
    for path in glob.glob(str(paths.REAL_FIXTURES / "*" / "trace_*")):
        used += _same(loads_plain(Path(path).read_bytes(), path))
    for path in glob.glob(str(paths.REAL_FIXTURES / "*" / "json" / "trace_*.json")):
        used += _same(json.loads(Path(path).read_text()), "json")
    assert used >= 14  # the common shape: every real gloo dump takes the fast path


def _ops(rng):
    out, record, seq = [], 0, {"0": 0, "5": 0}
    for _ in range(rng.randint(0, 40)):
        kind = rng.random()
        done = rng.random() < 0.8
        state = "completed" if done else rng.choice(["scheduled", "started"])
        if kind < 0.15:  # a batch: send, recv, then its closing entry
            p2p = rng.randint(1, 99)
            for op in ("send 0->1", "recv 0<-1"):
                out.append(entry(record, seq["5"], op=op, pg=("5", "pp"), pg_id=1, is_p2p=True, p2p_seq=p2p,
                                 state="scheduled", retired=False, duration_ms=None))
                record += 1
            out.append(entry(record, seq["5"], op="coalesced", pg=("5", "pp"), pg_id=1, is_p2p=True, p2p_seq=p2p,
                             state=state, sizes=()))
        elif kind < 0.25:  # a coalesced collective: two ops and the closing entry, one seq id
            seq["0"] += 1
            for op in ("all_reduce", "all_reduce", "allreduce_coalesced"):
                out.append(entry(record, seq["0"], op=op, state="scheduled" if op == "all_reduce" else state,
                                 sizes=((rng.randint(1, 3),),), retired=False if op == "all_reduce" else None))
                record += 1
            continue
        else:
            seq["0"] += 1
            out.append(entry(record, seq["0"], op=rng.choice(["all_reduce", "broadcast", "all_gather"]),
                             state=state, sizes=((rng.choice([4, 8]), 4),), dtype=rng.choice(["Float", "BFloat16"]),
                             line=rng.randint(1, 3), backend=rng.choice(["nccl", "gloo"]),
                             duration_ms=rng.choice([None, 1.5, 2])))
        record += 1
    if rng.random() < 0.2:
        rng.shuffle(out)  # a buffer read while it wrapped: out of order
    return out


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9))
def test_random_jobs(seed):
    rng = random.Random(seed)
    raw = pickle.loads(pickle.dumps(dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}), protocol=2))
    assert _same(raw)
    as_json = json.loads(json.dumps(raw))
    for e in as_json["entries"]:
        e.pop("frames")
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
    assert _same(as_json, "json")


def test_unusual_input_falls_back():
    raw = dump([entry(0, 1)], world=2)
    raw["entries"][0]["record_id"] = "0"  # a str where an int is expected: the general path copes
    assert trace_from_raw(raw, "x", "pickle", 0, 1, 1) is None
    assert trace_from_raw([entry(0, 1)], "x", "pickle", 0, 1, 1) is None  # the unversioned list form
