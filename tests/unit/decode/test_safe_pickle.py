"""Hostile pickles never run code; they fail with a clear error that names the file."""

import os
import pickle
import subprocess

import pytest

from frexport.decode.errors import DecodeError
from frexport.decode.load import load
from frexport.decode.read import decode_bytes, decode_file


class _System:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class _Popen:
    def __init__(self, argv):
        self.argv = argv

    def __reduce__(self):
        return (subprocess.Popen, (self.argv,))


class _Eval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


def _payloads(marker):
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        yield f"os.system/p{proto}", pickle.dumps(_System(f"touch {marker}"), protocol=proto)
        yield f"Popen/p{proto}", pickle.dumps(_Popen(["touch", str(marker)]), protocol=proto)
        yield f"eval/p{proto}", pickle.dumps(_Eval(f"open({str(marker)!r}, 'w')"), protocol=proto)
    # A payload hidden inside an otherwise valid dump.
    inner = {"version": "2.10", "entries": [{"record_id": 0, "frames": [_System(f"touch {marker}")]}]}
    yield "nested", pickle.dumps(inner, protocol=2)
    # BUILD on a plain dict and REDUCE with a non-callable: must be refused, not crash oddly.
    yield "build", b"\x80\x02}q\x00}q\x01b."
    yield "reduce", b"\x80\x02}q\x00)R."


def test_hostile_pickles_do_nothing_and_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    for name, data in _payloads(marker):
        path = tmp_path / f"trace_{abs(hash(name)) % 1000}"
        path.write_bytes(data)
        with pytest.raises(DecodeError) as info:
            decode_file(str(path))
        assert str(path) in str(info.value), name
        assert info.value.reason == "forbidden_opcode", (name, info.value)
        assert "refused pickle opcode" in info.value.detail
        assert not marker.exists(), f"{name} ran code"


def test_global_opcode_is_named():
    with pytest.raises(DecodeError) as info:
        decode_bytes(pickle.dumps(_System("true"), protocol=2), "x")
    assert "STACK_GLOBAL" in info.value.detail or "GLOBAL" in info.value.detail


def test_plain_data_pickle_is_accepted():
    d = decode_bytes(pickle.dumps({"version": "2.10", "entries": []}, protocol=4), "x")
    assert d.version == (2, 10) and d.entries == ()


def test_memo_bomb_is_bounded_by_the_sandbox(tmp_path):
    # 9 bytes that make CPython's unpickler allocate and zero 2^31 memo slots.
    (tmp_path / "trace_0").write_bytes(b"\x80\x02Nr\xff\xff\xff\x3f.")
    (tmp_path / "trace_1").write_bytes(pickle.dumps({"version": "2.10", "entries": []}, protocol=2))
    loaded = load([str(tmp_path)], workers=1)
    assert [t.rank for t in loaded.traces] == [1]
    assert len(loaded.errors) == 1 and loaded.errors[0].file.endswith("trace_0")
    assert "memory" in loaded.errors[0].error
