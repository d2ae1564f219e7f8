"""Parse only the new tail of a recorder's JSON body.

A busy rank's ring buffer holds thousands of entries and a poll every few seconds adds a few
hundred; parsing the whole body each time is most of the sidecar's CPU. This finds the entry with
a given record id and decodes from there to the end of the "entries" array with the real JSON
decoder (one entry at a time), plus the small rest of the document (pg_config, pg_status,
version). Every assumption is checked; when one does not hold (the entry is gone, the layout is
unexpected, a string looks like JSON syntax) it returns None and the caller parses the whole body.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")
_RECORD_ID = re.compile(r'"record_id"\s*:\s*(\d+)')


@dataclass
class Tail:
    meta: dict  # the document with "entries" emptied
    first_record: int | None  # record id of the oldest entry still in the buffer
    entries: list[dict]  # the entries from `since` on, in order (at least the one at `since`)


def parse_tail(body: bytes, since: int) -> Tail | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    key = text.find('"entries"')
    if key < 0 or text.find('"entries"', key + 1) >= 0:
        return None  # absent (parse it all: cheap) or ambiguous
    i = _WS.match(text, key + 9).end()
    if text[i:i + 1] != ":":
        return None
    i = _WS.match(text, i + 1).end()
    if text[i:i + 1] != "[":
        return None
    open_bracket = i
    first = _RECORD_ID.search(text, open_bracket)
    first_record = int(first.group(1)) if first else None
    at = re.compile(r'"record_id"\s*:\s*%d(?!\d)' % since).search(text, open_bracket)
    if at is None:
        return None  # it left the buffer, or the rank restarted: parse it all
    entries = _decode_entries(text, text.rfind("{", open_bracket, at.start()), since)
    if entries is None:
        return None
    close_bracket, rows = entries
    try:
        meta = json.loads(text[:open_bracket] + "[]" + text[close_bracket + 1:])
    except (ValueError, RecursionError):  # the full parse says what is wrong (read.py: too_deep)
        return None
    if not isinstance(meta, dict):
        return None
    return Tail(meta, first_record, rows)


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
            i = _WS.match(text, i).end()
            c = text[i:i + 1]
            if c == "]":
                break
            if c != ",":
                return None
            i = _WS.match(text, i + 1).end()
    except (ValueError, RecursionError):  # a peer's deeply nested value: the full parse reports it
        return None
    if since is not None and rows[0]["record_id"] != since:
        return None
    return i, rows
