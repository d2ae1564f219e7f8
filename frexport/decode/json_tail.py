"""Parse only the new tail of a recorder's JSON body.

A busy rank's ring buffer holds thousands of entries and a poll every few seconds adds a few
hundred; parsing the whole body each time is most of the sidecar's CPU. This finds the entry with
a given record id and decodes from there to the end of the "entries" array with the real JSON
decoder (one entry at a time), plus the small rest of the document (pg_config, pg_status,
version). Every assumption is checked; when one does not hold (the entry is gone, the layout is
unexpected, a string looks like JSON syntax) it returns None and the caller parses the whole body.

An ASCII body (what PyTorch writes: its JSON escapes everything else) is searched as bytes and
only the parts decoded are turned into text, so the cost and the memory follow the tail, not the
buffer; any other body is searched as text, with the same patterns, to the same result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")
# The same patterns over bytes: `\s` of a str pattern restricted to ASCII (str.isspace), `\d` is ASCII in both.
_SPACE_B = rb"[\t\n\x0b\x0c\r\x1c-\x1f ]"
# (each value's items are all str or all bytes, as its key: Any, as mypy cannot pair them with a text's type)
_PATTERNS: dict[type, tuple[Any, ...]] = {
    str: (_WS, re.compile(r'"record_id"\s*:\s*(\d+)'), r'"record_id"\s*:\s*%d(?!\d)', '"entries"', ":", "[", "{"),
    bytes: (re.compile(_SPACE_B + rb"*"), re.compile(rb'"record_id"' + _SPACE_B + rb"*:" + _SPACE_B + rb"*(\d+)"),
            rb'"record_id"' + _SPACE_B + rb"*:" + _SPACE_B + rb"*%d(?!\d)", b'"entries"', b":", b"[", b"{"),
}


@dataclass
class Tail:
    meta: dict  # the document with "entries" emptied
    first_record: int | None  # record id of the oldest entry still in the buffer
    entries: list[dict]  # the entries from `since` on, in order (at least the one at `since`)


def parse_tail(body: bytes, since: int, max_bytes: int | None = None) -> Tail | None:
    """`max_bytes`: the most bytes this may decode (from the entry at `since` to the end, plus what
    precedes "entries"); None also when it would need more."""
    if body.isascii():
        h: bytes | str = body
    else:
        try:
            h = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
    ws, record_id, since_pattern, entries_key, colon, bracket, brace = _PATTERNS[type(h)]
    key = h.find(entries_key)
    if key < 0 or h.find(entries_key, key + 1) >= 0:
        return None  # absent (parse it all: cheap) or ambiguous
    i = ws.match(h, key + 9).end()
    if h[i:i + 1] != colon:
        return None
    i = ws.match(h, i + 1).end()
    if h[i:i + 1] != bracket:
        return None
    open_bracket = i
    first = record_id.search(h, open_bracket)
    first_record = int(first.group(1)) if first else None
    at = _find_record(h, since, open_bracket)
    if at == -2:  # too many look-alikes to check one by one
        found = re.compile(since_pattern % since).search(h, open_bracket)
        at = found.start() if found else -1
    if at < 0:
        return None  # it left the buffer, or the rank restarted: parse it all
    start = h.rfind(brace, open_bracket, at)
    if start < 0:
        return None
    if max_bytes is not None and len(h) - start + open_bracket > max_bytes:
        return None
    if isinstance(h, bytes):
        tail, head = h[start:].decode("ascii"), h[:open_bracket].decode("ascii")
    else:
        tail, head = h[start:], h[:open_bracket]
    entries = _decode_entries(tail, 0, since)
    if entries is None:
        return None
    close_bracket, rows = entries
    try:
        meta = json.loads(head + "[]" + tail[close_bracket + 1:])
    except (ValueError, RecursionError):  # the full parse says what is wrong (read.py: too_deep)
        return None
    if not isinstance(meta, dict):
        return None
    return Tail(meta, first_record, rows)


def _find_record(h: bytes | str, since: int, lo: int, tries: int = 64) -> int:
    """Where the first match of `"record_id"\\s*:\\s*<since>(?!\\d)` at or after `lo` starts, -1 if
    none, -2 after `tries` occurrences of the digits that are not it (the caller then runs that
    regex, compiled for this `since`: the compilation costs more than this search)."""
    # each for bytes or for str (colon an int for bytes), as h: mypy cannot pair them with h's type
    digits: Any
    key: Any
    colon: Any
    is_space: Any
    is_digit: Any
    if type(h) is bytes:
        digits, key, colon = b"%d" % since, b'"record_id"', 58
        is_space, is_digit = _ASCII_SPACE.__contains__, _ASCII_DIGITS.__contains__
    else:
        digits, key, colon = str(since), '"record_id"', ":"
        is_space, is_digit = str.isspace, str.isdecimal
    n, pos = len(digits), lo
    for _ in range(tries):
        pos = h.find(digits, pos)
        if pos < 0:
            return -1
        end, pos = pos + n, pos + 1
        if end < len(h) and is_digit(h[end]):
            continue
        j = pos - 1
        while j > lo and is_space(h[j - 1]):
            j -= 1
        if j <= lo or h[j - 1] != colon:
            continue
        j -= 1
        while j > lo and is_space(h[j - 1]):
            j -= 1
        if j - len(key) >= lo and h[j - len(key):j] == key:
            return j - len(key)
    return -2


_ASCII_SPACE = frozenset(b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ")
_ASCII_DIGITS = frozenset(b"0123456789")


def _decode_entries(text: str, start: int, since: int | None) -> tuple[int, list[dict]] | None:
    """Decode entry objects from `start` to the closing ']'; returns (index of ']', entries)."""
    if start < 0:
        return None
    rows: list[dict] = []
    i = start
    try:
        while True:
            obj, i = _DECODER.raw_decode(text, i)
            if not isinstance(obj, dict) or not isinstance(obj.get("record_id"), int):
                return None
            if rows and obj["record_id"] <= rows[-1]["record_id"]:
                return None  # not in record order: the buffer was being rewritten; parse it all
            rows.append(obj)
            i = _WS.match(text, i).end()  # type: ignore[union-attr]  # \s* always matches
            c = text[i:i + 1]
            if c == "]":
                break
            if c != ",":
                return None
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]  # \s* always matches
    except (ValueError, RecursionError):  # a peer's deeply nested value: the full parse reports it
        return None
    if since is not None and rows[0]["record_id"] != since:
        return None
    return i, rows
