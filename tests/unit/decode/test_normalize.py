"""Every dump format and variant becomes the same model."""

import json
import pickle

import pytest

from frexport.decode.errors import DecodeError
from frexport.decode.fields import parse_profiling_name, parse_ranks, parse_version
from frexport.decode.read import decode_bytes
from tests.support.synth import dump, entry


def test_versions_compare_as_integers():
    assert parse_version("2.10") > parse_version("2.9") > parse_version("2.2")
    assert parse_version("2.10") == (2, 10)
    assert parse_version("2.10.1") is None and parse_version(2.1) is None and parse_version("x.y") is None


def test_pickle_and_json_of_one_snapshot_agree():
    raw = dump([entry(0, 1), entry(1, 2, state="started")], world=2)
    as_json = json.loads(json.dumps(raw))  # tuple -> list, like PyTorch's JSON writer
    for e in as_json["entries"]:
        del e["frames"]  # JSON dumps never carry stacks
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0  # 0 instead of None
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
    a = decode_bytes(pickle.dumps(raw, protocol=2), "p")
    b = decode_bytes(json.dumps(as_json).encode(), "j")
    assert a.format == "pickle" and b.format == "json"
    strip = lambda es: [e._replace(frames=(), call_site=None) for e in es]  # noqa: E731
    assert strip(a.entries) == strip(b.entries)
    assert a.entries[1].time_completed_ns is None and b.entries[1].time_completed_ns is None
    assert a.pg_config == b.pg_config


def test_gloo_json_variants():
    # What torch 2.13 gloo writes through the worker server: str pg_status, list process_group, 0 times,
    # the empty pg_config placeholder, nccl_comm_state.
    doc = {
        "comm_lib_version": "", "nccl_comm_state": {},
        "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}},
        "pg_status": {"0": {"last_completed_collective": "8", "last_enqueued_collective": "8",
                            "last_started_collective": "-1"}},
        "version": "2.10",
        "entries": [{"collective_seq_id": 1, "input_dtypes": ["Float"], "input_sizes": [[4]], "is_p2p": False,
                     "op_id": 1, "output_dtypes": ["Float"], "output_sizes": [[4]], "p2p_seq_id": 0, "pg_id": 0,
                     "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce", "record_id": 0,
                     "retired": True, "state": "scheduled", "thread_id": "1", "thread_name": "python3",
                     "time_created_ns": 5, "time_discovered_completed_ns": 0, "time_discovered_started_ns": 0,
                     "timeout_ms": 1800000}],
    }
    d = decode_bytes(json.dumps(doc).encode(), "w")
    assert d.pg_config == ()  # the placeholder says nothing
    assert d.pg_status[0].last_enqueued == 8 and d.pg_status[0].last_started == -1
    e = d.entries[0]
    assert (e.backend, e.op, e.pg_name, e.pg_desc) == ("gloo", "all_reduce", "0", "default_pg")
    assert e.time_started_ns is None and e.time_completed_ns is None and e.duration_ms is None
    assert e.frames == () and e.call_site is None and e.retired is True


def test_json_without_entries_key():
    d = decode_bytes(b'{"version": "2.10", "pg_config": {}, "pg_status": {}}', "w")
    assert d.entries == ()


def test_unversioned_list_form_and_seq_id():
    raw = [{"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "seq_id": 7,
            "profiling_name": "nccl:all_reduce", "time_created_ns": 1, "input_sizes": [[2]], "output_sizes": [[2]],
            "state": "completed", "retired": True}]
    d = decode_bytes(pickle.dumps(raw, protocol=2), "old")
    assert d.version is None and "unversioned" in d.notes[0]
    assert d.entries[0].collective_seq_id == 7 and d.entries[0].input_dtypes == ()


def test_version_2_2_shape_without_pg_status_and_with_nccl_version():
    raw = dump([entry(0, 1)], world=2, version="2.2")
    del raw["pg_status"]
    raw["nccl_version"] = raw.pop("comm_lib_version")
    for e in raw["entries"]:
        for k in ("thread_id", "thread_name", "op_id", "is_p2p"):
            del e[k]
    d = decode_bytes(pickle.dumps(raw, protocol=2), "v22")
    assert d.version == (2, 2) and d.comm_lib_version == "2.21.5" and d.pg_status == ()
    e = d.entries[0]
    assert e.thread_id is None and e.op_id is None and e.is_p2p is False


@pytest.mark.parametrize("version", ["2.11", "2.99", "3.0"])
def test_newer_versions_are_read_with_a_note(version):
    raw = dump([entry(0, 1)], world=2, version=version)
    raw["entries"][0]["a_future_field"] = {"x": 1}
    d = decode_bytes(pickle.dumps(raw, protocol=2), "new")
    assert len(d.entries) == 1 and any(version in n and "newer" in n for n in d.notes)


def test_malformed_entries_are_skipped_and_counted():
    raw = dump([entry(0, 1), {"record_id": "x", "profiling_name": 5}, "junk", entry(1, 2)], world=1)
    d = decode_bytes(pickle.dumps(raw, protocol=2), "m")
    assert [e.collective_seq_id for e in d.entries] == [1, 2]
    assert any("2 malformed entries skipped" in n for n in d.notes)


def test_not_a_dump():
    for data in (b'{"hello": 1}', b"[1, 2", pickle.dumps(42, protocol=2), b"just text\n"):
        with pytest.raises(DecodeError):
            decode_bytes(data, "x")


def test_helpers():
    assert parse_ranks("[0, 1, 2]") == (0, 1, 2) and parse_ranks("[]") is None and parse_ranks([3, 4]) == (3, 4)
    assert parse_profiling_name("nccl:send 1->2") == ("nccl", "send", 1, 2)
    assert parse_profiling_name("nccl:recv 3<-0") == ("nccl", "recv", 0, 3)
    assert parse_profiling_name("gloo:all_reduce") == ("gloo", "all_reduce", None, None)


def test_call_site_skips_torch_frames():
    d = decode_bytes(pickle.dumps(dump([entry(0, 1, line=42)], world=1), protocol=2), "c")
    assert d.entries[0].call_site.filename == "/job/train.py" and d.entries[0].call_site.line == 42


def test_unicode_digits_that_int_refuses():
    # found by hypothesis: '¹'.isdigit() is True but int('¹') raises
    raw = dump([entry(0, 1)], world=2, pg_status={"¹": {"last_enqueued_collective": "²"}})
    raw["version"] = "2.¹"
    d = decode_bytes(pickle.dumps(raw, protocol=2), "u")
    assert d.pg_status == () and d.version is None


def test_counters_that_look_numeric_but_are_not():
    # found by atheris after 500k inputs: '--1' passed a lstrip('-').isdecimal() check, int() refused it
    raw = dump([entry(0, 1)], world=2, pg_status={"0": {"last_enqueued_collective": "--1",
                                                         "last_started_collective": "1_0",
                                                         "last_completed_collective": "9" * 5000}})
    d = decode_bytes(pickle.dumps(raw, protocol=2), "u")
    assert d.pg_status[0].last_enqueued is None and d.pg_status[0].last_completed is None
    assert d.pg_status[0].last_started == 10  # int() reads '1_0' as 10: still a number, harmless
