"""Bytes or files in, `RankDump` out: format sniffing, size caps and clear errors.

Pickle and JSON are told apart by their first byte, not the file name: PyTorch
writes pickles without an extension and people rename files. A pickle is read by
the compiled scanner where it is built and the dump has the common shape
(scanned_dump.py, the scanner analyze uses), else by the restricted unpickler.
"""

from __future__ import annotations

import os
import stat

from frexport.decode.errors import DecodeError
from frexport.decode.json_decode import loads as _json
from frexport.decode.normalize import MAX_ENTRIES, normalize
from frexport.decode.safe_pickle import loads_plain
from frexport.decode.scanned_dump import dump_from_pickle
from frexport.model.dump import RankDump

DEFAULT_MAX_BYTES = 512 * 1024 * 1024


def sniff_format(head: bytes) -> str:
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")  # whitespace and a UTF-8 BOM
    return "json" if stripped[:1] in (b"{", b"[") else "pickle"


def decode_bytes(data: bytes, source: str, rank: int | None = None, dumped_at_ns: int | None = None,
                 keep_frames: bool = True, only: str | None = None, previous: dict | None = None,
                 max_entries: int = MAX_ENTRIES, recorder: str | None = None) -> RankDump:
    """`only="json"` refuses anything else: in-process callers must not unpickle (see sandbox.py)."""
    if not data:
        raise DecodeError(source, "empty", "empty file (0 bytes): the dump was never written or is still being written")
    fmt = sniff_format(data[:64])
    if only is not None and fmt != only:
        raise DecodeError(source, "unexpected_format", f"expected {only}, got something else")
    if fmt == "pickle":  # the compiled scanner first, as analyze reads pickles (None: the pure path)
        dump = dump_from_pickle(data, source, rank, dumped_at_ns, keep_frames, max_entries, recorder)
        if dump is not None:
            return dump
    raw = _json(data, source) if fmt == "json" else loads_plain(data, source)
    return normalize(raw, source, fmt, rank=rank, dumped_at_ns=dumped_at_ns, size_bytes=len(data),
                     keep_frames=keep_frames, previous=previous, max_entries=max_entries, recorder=recorder)


def decode_file(path: str, rank: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                keep_frames: bool = True, follow_symlinks: bool = True) -> RankDump:
    data, st = read_checked(path, max_bytes, follow_symlinks)
    return decode_bytes(data, path, rank=rank, dumped_at_ns=st.st_mtime_ns, keep_frames=keep_frames)


def read_raw(path: str, max_bytes: int = DEFAULT_MAX_BYTES, follow_symlinks: bool = True) -> tuple:
    """(plain data as decoded, "pickle" | "json", os.stat_result) of a dump file, before normalizing.
    Unpickles: call it only inside a sandbox worker (see sandbox.py)."""
    data, st = read_checked(path, max_bytes, follow_symlinks)
    fmt = sniff_format(data[:64])
    return decode_raw(data, path, fmt), fmt, st


def decode_raw(data: bytes, source: str, fmt: str) -> object:
    """Plain data from a dump's bytes (`fmt` as sniff_format says). Unpickles: sandbox workers only."""
    return _json(data, source) if fmt == "json" else loads_plain(data, source)


def read_checked(path: str, max_bytes: int = DEFAULT_MAX_BYTES, follow_symlinks: bool = True) \
        -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file, read once: open (never blocking, never through a final symlink
    unless asked), fstat the descriptor, check, read at most `max_bytes`. Whatever replaces the
    path meanwhile (a FIFO, another file) cannot change what was checked: decode these bytes."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) \
        | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO must not hang us
    except OSError as exc:
        raise DecodeError(path, "unreadable", f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DecodeError(path, "not_a_file", "not a regular file")
        if st.st_size == 0:
            raise DecodeError(path, "empty",
                              "empty file (0 bytes): the dump was never written or is still being written")
        if st.st_size > max_bytes:
            raise DecodeError(path, "too_large", f"{st.st_size} bytes is over the {max_bytes}-byte limit")
        parts, total = [], 0
        want = st.st_size + 1  # the whole file in one read, one buffer (the join of one part is that part)
        while total <= max_bytes:
            chunk = os.read(fd, min(want, max_bytes + 1 - total))
            want = 1 << 20  # it grew while being read
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # grew while being read
            raise DecodeError(path, "too_large", f"over the {max_bytes}-byte limit (the file grew while read)")
        data = b"".join(parts)
    except OSError as exc:
        raise DecodeError(path, "unreadable", f"read failed: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if not data:
        raise DecodeError(path, "empty", "empty file (0 bytes): the dump was never written or is still being written")
    return data, st

