"""Restricted unpickling: a pickle can only produce plain data, never run code.

The C unpickler is used for speed. Every way a pickle can reach a callable goes
through `find_class` (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) or `persistent_load`
(PERSID, BINPERSID); both refuse here. Without a callable, REDUCE, BUILD and
NEWOBJ cannot do anything and fail. When loading fails we re-scan the opcodes
(pure Python, bounded) to name the refused opcode in the error.

What this module does not bound is memory: CPython's unpickler sizes its memo
from the index a LONG_BINPUT declares, so a 9-byte file can allocate gigabytes.
Callers that read untrusted bytes run this inside a resource-limited worker
process (see `sandbox.py`).
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any, BinaryIO

from frexport.decode.errors import DecodeError

# Opcodes that build objects other than plain data, or fetch callables.
_FORBIDDEN = frozenset(
    {
        "GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ",
        "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID", "NEXT_BUFFER",
        "READONLY_BUFFER",
    }
)
_DIAGNOSE_MAX_OPCODES = 2_000_000


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}: only plain data is accepted")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id: only plain data is accepted")


def load_plain(stream: BinaryIO, source: str, data_for_diagnosis: bytes | None = None) -> Any:
    """Unpickle plain data from `stream` (a buffered binary file with peek())."""
    try:
        return _PlainDataUnpickler(stream).load()
    except Exception as exc:  # the C unpickler raises many types on hostile input
        raise _explain(exc, source, stream, data_for_diagnosis) from None


def loads_plain(data: bytes, source: str) -> Any:
    # BufferedReader gives the C unpickler peek(), which makes it ~3x faster than BytesIO.
    return load_plain(io.BufferedReader(io.BytesIO(data), buffer_size=1 << 16), source, data)


def _explain(exc: Exception, source: str, stream: BinaryIO, data: bytes | None) -> DecodeError:
    if isinstance(exc, MemoryError):
        return DecodeError(source, "too_large", "pickle needs more memory than allowed (memo or size bomb)")
    if data is None:
        try:
            stream.seek(0)
            data = stream.read()
        except (OSError, ValueError):
            data = b""
    forbidden, complete = scan_opcodes(data)
    # Protocol 2+ pickles start with PROTO (0x80). Anything else is only called a pickle if it
    # parses to the end: a text file also "decodes" into protocol-0 opcodes for a while.
    if not data.startswith(b"\x80") and not complete:
        return DecodeError(source, "not_a_dump", "not a Flight Recorder dump: neither JSON nor a pickle")
    if forbidden is not None:
        name, pos = forbidden
        return DecodeError(source, "forbidden_opcode",
                           f"refused pickle opcode {name} at byte {pos}: only plain data is accepted")
    if isinstance(exc, EOFError) or "truncated" in str(exc) or "ran out of input" in str(exc).lower():
        return DecodeError(source, "truncated", f"pickle is truncated ({len(data)} bytes)")
    return DecodeError(source, "corrupt", f"not a readable pickle: {type(exc).__name__}: {_short(exc)}")


def scan_opcodes(data: bytes) -> tuple[tuple[str, int] | None, bool]:
    """(first opcode that is not plain data, whether the stream parsed to STOP), bounded in work."""
    forbidden = None
    try:
        for count, (op, _arg, pos) in enumerate(pickletools.genops(data)):
            if forbidden is None and op.name in _FORBIDDEN:
                forbidden = (op.name, pos if pos is not None else -1)
            if count >= _DIAGNOSE_MAX_OPCODES:
                return forbidden, False
    except Exception:  # genops stops at the first malformed opcode
        return forbidden, False
    return forbidden, True


def _short(exc: Exception, limit: int = 160) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
