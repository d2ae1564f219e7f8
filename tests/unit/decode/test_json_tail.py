"""Polling decodes only the new tail of a body (json_decode.parse_tail); it must always end in the same
state as a full parse."""

import glob
import json
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from frexport.config import WorkerServers
from frexport.decode.json_decode import parse_tail
from frexport.decode.normalize import KindedEntries, normalize
from frexport.decode.read import decode_bytes
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from frexport.sources.http_client import Target
from frexport.sources.worker_server import RankTarget, WorkerServerSource
from tests.support import paths
from tests.support.examples import examples
from tests.support.synth import dump
from tests.unit.decode.test_fast_trace import _ops
from tests.unit.decode.test_json_decode import _ENTRY, _ENTRY_EDITS, _WRITERS, _hostile, _json_shapes


def _body(entries, compact: bool, desc: str = "default_pg") -> bytes:
    doc = {"comm_lib_version": "", "entries": entries, "nccl_comm_state": {},
           "pg_config": {"0": {"desc": desc, "name": "0", "ranks": "[0, 1]"}},
           "pg_status": {"0": {"last_completed_collective": "1", "last_enqueued_collective": "1",
                               "last_started_collective": "-1"}}, "version": "2.10"}
    return json.dumps(doc, sort_keys=True, separators=(",", ":") if compact else (", ", ": ")).encode()


def _entry(rid, created, done=True, name="nccl:all_reduce"):
    return {"collective_seq_id": rid + 1, "input_dtypes": ["Float"], "input_sizes": [[4]], "is_p2p": False,
            "op_id": rid, "output_dtypes": ["Float"], "output_sizes": [[4]], "p2p_seq_id": 0, "pg_id": 0,
            "process_group": ["0", "default_pg"], "profiling_name": name, "record_id": rid, "retired": done,
            "state": "completed" if done else "started", "thread_id": "1", "thread_name": "t{]}",
            "time_created_ns": created, "time_discovered_completed_ns": created + 5 if done else 0,
            "time_discovered_started_ns": created + 1, "timeout_ms": 1000}


def _record_ids(tail) -> list:
    if isinstance(tail.entries, KindedEntries):
        return [n[0] for n in tail.entries.numbers]
    return [e["record_id"] for e in tail.entries]


def test_tail_from_a_record():
    es = [_entry(i, 1000 + i) for i in range(10)]
    for compact in (True, False):
        tail = parse_tail(_body(es, compact), 7)
        assert isinstance(tail.entries, KindedEntries)  # the common shape: by kind
        assert _record_ids(tail) == [7, 8, 9] and tail.first_record == 0 and tail.first_created == 1007
        assert tail.meta["version"] == "2.10" and "entries" not in tail.meta
    assert parse_tail(_body(es, True), 42) is None  # not there: the caller parses it all
    assert parse_tail(b'{"version": "2.10"}', 0) is None
    assert parse_tail(b"\xff\xfe", 0) is None
    gap = es[:3] + es[6:]  # record ids not consecutive: found by bisection
    assert _record_ids(parse_tail(_body(gap, True), 7)) == [7, 8, 9]
    assert parse_tail(_body(gap, True), 4) is None
    assert parse_tail(_body(es[::-1], True), 7) is None  # not in record order: parse it all
    assert parse_tail(_body(es, True).replace(b'"t{]}"', b'"\xff"'), 7) is None  # not UTF-8
    assert parse_tail(_body(es, True).replace(b'"version":"2.10"', b'"version":"2.10","x":NaN'), 7) is None
    assert parse_tail(_body(es, True), 7, max_bytes=100) is None  # more to decode than allowed


class _Fake(WorkerServerSource):
    """The real decode path, fed bodies directly (no socket needed for this property)."""

    def feed(self, state, rank, body, now):
        dump = self._decode(RankTarget(rank, Target(unix_path="/x"), "x"), "gloo", body, now)
        self._last[(rank, "gloo")] = dump
        return state.ingest(dump, "x", now)


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_incremental_state_equals_full_parse(data):
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    capacity = data.draw(st.integers(3, 40))
    compact = data.draw(st.booleans())
    desc = data.draw(st.sampled_from(["default_pg", 'odd "]},{"record_id":5', "x{"]))
    inc, full = LiveState(), LiveState()
    src = _Fake(HealthRegistry(), WorkerServers())
    events_inc, events_full = [], []
    records, next_id, clock = [], 0, 10**9
    for step in range(data.draw(st.integers(1, 25))):
        if rng.random() < 0.08:  # the rank restarts: record ids begin again
            records, next_id = [], 0
        for _ in range(rng.randint(0, 12)):
            clock += 1000
            records.append(_entry(next_id, clock, done=False, name=rng.choice(["nccl:all_reduce", "nccl:send 0->1"])))
            next_id += 1
        for e in records:  # some unfinished entries finish, in any order
            if not e["retired"] and rng.random() < 0.6:
                e.update(_entry(e["record_id"], e["time_created_ns"], done=True, name=e["profiling_name"]))
        records = records[-capacity:]
        body = _body(records, compact, desc)
        now = clock + step
        events_inc.extend(src.feed(inc, 0, body, now))
        events_full.extend(full.ingest(decode_bytes(body, "x", rank=0, dumped_at_ns=now), "x", now))
        a, b = inc.view().ranks[0], full.view().ranks[0]
        assert [e._replace() for e in a.dump.entries] == list(b.dump.entries)
        assert (a.epoch, a.dropped, a.max_record) == (b.epoch, b.dropped, b.max_record)
        assert a.groups == b.groups
    assert [(e.rank, e.epoch, e.entry.record_id, e.outcome) for e in events_inc] == \
           [(e.rank, e.epoch, e.entry.record_id, e.outcome) for e in events_full]
    assert inc.view().collectives == full.view().collectives


def _both_ways(data: bytes, since: int) -> bool:
    """Where parse_tail answers, its entries (by kind or plain) normalize to what the whole text's
    entries from `since` on normalize to, read by the standard library. True when it read them by kind."""
    tail = parse_tail(data, since)
    if tail is None:
        return False
    doc = json.loads(data)
    at = next(i for i, e in enumerate(doc["entries"]) if isinstance(e, dict) and e.get("record_id") == since)
    plain = {k: v for k, v in doc.items() if k in tail.meta}
    got = normalize({**tail.meta, "entries": tail.entries}, "x", "json", rank=1, dumped_at_ns=5, keep_frames=False)
    want = normalize({**plain, "entries": doc["entries"][at:]}, "x", "json", rank=1, dumped_at_ns=5,
                     keep_frames=False)
    assert got == want
    return isinstance(tail.entries, KindedEntries)


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 10**9), st.lists(_hostile, min_size=1, max_size=5), st.sampled_from(range(3)))
def test_a_tail_by_kind_normalizes_as_its_plain_entries(seed, hostile, writer):
    """Hostile strings, odd numbers, extra and missing keys, three writers' spacing."""
    rng = random.Random(seed)
    raw = _json_shapes(rng, dump(_ops(rng), world=2, groups={"5": ("pp", [0, 1])}), hostile)
    rids = [e.get("record_id") for e in raw["entries"]]
    if not rids:
        return
    since = rng.choice(rids)
    if type(since) is not int or rids.count(since) != 1:
        return
    _both_ways(json.dumps(raw, **_WRITERS[writer]).encode("utf-8", "surrogatepass"), since)


def test_the_common_shape_is_read_by_kind():
    es = [_entry(i, 1000 + i, done=i < 8, name=["nccl:all_reduce", "nccl:send 0->1"][i % 2]) for i in range(12)]
    for compact in (True, False):
        assert _both_ways(_body(es, compact), 3)


def test_one_odd_entry_in_a_tail_agrees_with_the_plain_path():
    """An entry edited as the typed columns' traps edit one, between two plain ones."""
    one = json.loads(_ENTRY)
    first, last = dict(one, record_id=0), dict(one, record_id=2, collective_seq_id=3)
    for edit in _ENTRY_EDITS:
        middle = edit(json.dumps(dict(one, record_id=1, collective_seq_id=2)))
        text = '{"version": "2.10", "entries": [%s, %s, %s]}' % (json.dumps(first), middle, json.dumps(last))
        try:
            json.loads(text)
        except ValueError:
            continue  # not JSON: no tail (the whole parse says why)
        for since in (0, 1):
            _both_ways(text.encode("utf-8", "surrogatepass"), since)


def test_by_kind_reuses_a_finished_entry_as_the_plain_path_does():
    """`previous` (a poller's last snapshot): a finished entry seen before is reused before any rule,
    also where its kind would now be refused (a profiling name that is not a string)."""
    es = [_entry(i, 1000 + i) for i in range(4)]
    body = _body(es, True)
    before = normalize(json.loads(body), "x", "json", rank=1)
    previous = {e.record_id: e for e in before.entries}
    es[2]["profiling_name"] = 5  # refused: the plain path skips it, unless it reuses what it had
    es[3]["profiling_name"] = 6
    del previous[3]  # not seen before: skipped both ways
    body = _body(es, True)
    tail = parse_tail(body, 1)
    assert isinstance(tail.entries, KindedEntries)
    doc = json.loads(body)
    got = normalize({**tail.meta, "entries": tail.entries}, "x", "json", rank=1, previous=previous)
    want = normalize({**doc, "entries": doc["entries"][1:]}, "x", "json", rank=1, previous=previous)
    assert got == want
    assert [e.record_id for e in got.entries] == [1, 2] and got.notes == ("1 malformed entries skipped",)


def test_real_tails_are_read_by_kind():
    """The captured jobs' JSON (the PyPI wheels' of torch 2.14.1 and 2.15.0 too), from their middle
    entry on: read by kind, and normalized as their plain entries are."""
    read: dict[str, bool] = {}
    for p in glob.glob(str(paths.REAL_FIXTURES / "**" / "json" / "trace_*"), recursive=True):
        data = Path(p).read_bytes()
        rids = [e["record_id"] for e in json.loads(data).get("entries") or ()]
        if rids:
            read[p] = _both_ways(data, rids[len(rids) // 2])
    wheels = [by_kind for p, by_kind in read.items() if "/torch-2.1" in p]
    assert len(wheels) >= 8 and all(wheels) and sum(read.values()) >= 48
