"""The agent's live-poll handler: only the entries the sidecar has not settled, without stack frames.

The sidecar polls every rank every few seconds and, between polls, a busy rank's 2000-entry ring
buffer gains a few hundred entries. PyTorch's own `fr_trace_json` serializes all 2000 each time,
with nlohmann::json inside the trainer (the costliest of its dumps: about 3x the pickle dump of
the same buffer), and torch 2.13 offers no dump of part of the buffer. This handler takes the
cheapest full dump there is (the pickle without stack frames: the live view never reads frames;
evidence fetches them separately from `frexport_fr_pickle`), loads it here, and sends as JSON only
the entries from the sidecar's cursor on:

    POST /handler/frexport_fr_live?after=<record id>

`after` is the record id of the oldest entry the sidecar still expects to change (its first
unsettled one, else its newest). The answer is PyTorch's JSON dump layout (version, pg_config,
pg_status, entries) with the entries whose record id is at least `after`, and one key of ours,
`frexport_first_record`: the record id of the oldest entry still in the buffer, so the sidecar
knows which of its older entries the buffer still holds. Without `after`, all entries.

    POST /handler/frexport_fr_live?after=<record id>&format=pickle

answers the pickle itself with the entries before `after` cut out of its bytes (`_cut`), nothing
loaded or written here: the trainer's part of a poll is then PyTorch's dump and a fraction of a
millisecond (the JSON answer loads ~1000 entries and writes them again, a third of the poll's cost in
the trainer). The sidecar reads it with the compiled scanner, which refuses anything outside the
common shape, and keeps the entries from `after` on; the oldest entry is always kept (its record id
is the first record). Where no cut can be made, the whole pickle. Only a sidecar that asks gets it:
an older one keeps its JSON.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import threading
import time
from collections.abc import Callable
from typing import Any

LIVE_HANDLER = "frexport_fr_live"
FIRST_RECORD_KEY = "frexport_first_record"
RECORDERS_HANDLER = "frexport_recorders"  # {"recorders": [names], "torch": version}: what to poll
STATUS_HANDLER = "frexport_fr_status"  # one recorder's pg_config and pg_status, no entries
BUFFER_SIZE_KEY = "frexport_buffer_size"  # in a status: the ring buffer's entries (TORCH_FR_BUFFER_SIZE)
EXITING_KEY = "frexport_exiting"  # in a status: the process is exiting, read its entries now (FinalRead)


class FinalRead:
    """A sidecar reading status first fetches a rank's entries only when they can say something new,
    so the last ones of a rank that exits would never be read. At exit the status says so
    (EXITING_KEY) and the exit waits for every recorder's entries to be read once more: only where a
    sidecar asked for the status lately, and at most `max_s`."""

    def __init__(self, names: Callable[[], list[str]], window_s: float = 3.0, max_s: float = 3.0) -> None:
        self._names, self.window_s, self.max_s = names, window_s, max_s
        self.exiting = False
        self._status_at = float("-inf")
        self._read: set[str] = set()
        self._done = threading.Event()

    def status_asked(self) -> None:
        self._status_at = time.monotonic()

    def entries_read(self, recorder: str) -> None:
        if self.exiting:
            names = self._names()
            self._read.add(recorder or names[0])
            if set(names) <= self._read:
                self._done.set()

    def wait(self) -> None:
        """Called at exit, before the server stops (sleeping here lets the server's threads run)."""
        self.exiting = True
        if time.monotonic() - self._status_at < self.window_s:
            self._done.wait(self.max_s)


def live_dump(dump_pickle: Callable[..., bytes], after: int | None, fmt: str = "json") -> bytes:
    """The body for a poll from `after` on (None: everything), from one pickle dump: JSON, or with
    `fmt="pickle"` the pickle with what precedes `after` cut out where that can be done."""
    data = dump_pickle(True, False, False)
    if fmt == "pickle":
        return (_cut(data, after) if after is not None else None) or data
    raw = (_load_from(data, after) if after is not None else None) or pickle.loads(data)
    entries = raw.pop("entries", None) or []
    raw[FIRST_RECORD_KEY] = entries[0]["record_id"] if entries else None
    if after is not None:
        # oldest first with ascending record ids (one reset epoch): the cursor is near the end
        start = len(entries)
        while start > 0 and entries[start - 1]["record_id"] >= after:
            start -= 1
        entries = entries[start:]
    raw["entries"] = entries
    return json.dumps(raw, separators=(",", ":")).encode()


def _load_from(data: bytes, after: int) -> dict[str, Any] | None:
    """The dump loaded from its `_cut` bytes; None where the cut cannot be made, or made wrong (the
    caller loads it all). Loading all 2000 entries costs a third of the dump itself and makes ~16 000
    Python containers, enough to trigger full collections of the trainer's whole heap."""
    cut = _cut(data, after)
    if cut is None:
        return None
    try:
        raw = pickle.loads(cut)
        rids = [e["record_id"] for e in raw["entries"]]
    except Exception:  # noqa: BLE001 - a cut in the wrong place: load it all
        return None
    return raw if _cut_holds(rids, after) else None


def _cut_holds(rids: list[int], after: int) -> bool:
    """Whether the record ids of a `_cut` pickle's entries are what a right cut leaves: a few older
    entries in record order, then every id from `after` on, consecutively (the sidecar checks its
    pickle answer so too: decode/pickle_tail.py)."""
    tail = rids.index(after) if after in rids else -1
    head = rids[:tail]
    return tail >= 1 and rids[tail:] == list(range(after, after + len(rids) - tail)) \
        and all(x < y for x, y in zip(head, rids[1:tail + 1]))


def _cut(data: bytes, after: int) -> bytes | None:
    """The pickle with the entries between the first one and `after` cut out of its bytes; None
    where that cannot be done (`after` is the first entry, not in the buffer, an unknown layout).

    PyTorch's pickler (protocol 2)
    writes each entry as `}(` + key/value pairs with the key "record_id" first, and memoizes only
    strings: each is written once (BINUNICODE `X`, then BINPUT `q`/`r`) and referenced after (BINGET
    `h`/`j`). So whole entries can be cut from the entry list: the first entry and every entry that
    writes a string for the first time stay (later entries may refer to those strings), the rest
    before `after` goes. A cut that lands wrong fails to load or fails the record-id check
    (`_cut_holds`); a reference to a string that was cut out fails to load (the memo has no such
    index): both fall back to a full load, never to wrong values.
    """
    # "record_id" is written in full in the first entry only; its memo index is what every later
    # entry starts with.
    key = data.find(b"X\x09\x00\x00\x00record_id")
    if key < 2 or data[key - 2:key] != b"}(":
        return None
    put = key + 14
    if data[put:put + 1] == b"q":
        ref = b"h" + data[put + 1:put + 2]
    elif data[put:put + 1] == b"r":
        ref = b"j" + data[put + 1:put + 5]
    else:
        return None
    entry = b"}(" + ref
    first_cut = data.find(entry, put)  # the second entry
    cut_to = data.find(entry + _int_opcode(after), put)
    if first_cut < 0 or cut_to <= first_cut:
        return None  # `after` is the first entry, or not in the buffer: nothing to cut
    # Keep, besides the head, each entry of the cut region that writes a string for the first time
    # (an `X` whose length leads to a BINPUT; a look-alike in binary data only keeps one more entry).
    spans = [(0, first_cut)]
    for m in re.finditer(b"X", data[first_cut:cut_to]):
        at = first_cut + m.start()
        end = at + 5 + int.from_bytes(data[at + 1:at + 5], "little")
        if at < spans[-1][1] or not (end < cut_to and data[end] in b"qr"):
            continue
        start = data.rfind(entry, spans[-1][1], at)
        if start < 0:
            start = spans[-1][1]
        stop = data.find(entry, end, cut_to)
        stop = cut_to if stop < 0 else stop
        if start == spans[-1][1]:
            spans[-1] = (spans[-1][0], stop)
        else:
            spans.append((start, stop))
    spans.append((cut_to, len(data)))
    return b"".join(data[i:j] for i, j in spans)


def _int_opcode(value: int) -> bytes:
    """An int as PyTorch's pickler writes it (BININT1, BININT2, BININT, else an 8-byte LONG1)."""
    if 0 <= value <= 0xFF:
        return b"K" + value.to_bytes(1, "little")
    if 0 <= value <= 0xFFFF:
        return b"M" + value.to_bytes(2, "little")
    if -(1 << 31) <= value < 1 << 31:
        return b"J" + value.to_bytes(4, "little", signed=True)
    return b"\x8a\x08" + value.to_bytes(8, "little", signed=True)


def parse_after(text: str) -> int | None:
    """The `after` parameter: None when absent (empty), else a record id; ValueError otherwise."""
    if not text:
        return None
    if not text.isdecimal() or len(text) > 20:
        raise ValueError(f"after={text[:40]!r} is not a record id")
    return int(text)


_CONTENT_TYPE = {"json": "application/json", "pickle": "application/octet-stream"}


def make_handler(dump_for: Callable[[str], Callable[..., bytes] | None],
                 final: FinalRead | None = None) -> Callable[[Any, Any], None]:
    """The worker-server handler (req, resp) around `live_dump`: `?backend=<recorder>` (default: the first
    recorder that holds a group)."""

    def handler(req: Any, resp: Any) -> None:
        try:
            after = parse_after(req.get_param("after"))
        except ValueError as exc:
            resp.set_content(str(exc), "text/plain")
            resp.set_status(400)
            return
        fmt = req.get_param("format") or "json"
        if fmt not in _CONTENT_TYPE:
            resp.set_content(f"format={fmt[:40]!r}: json or pickle", "text/plain")
            resp.set_status(400)
            return
        dump = dump_for(req.get_param("backend"))
        if dump is None:
            resp.set_content("no such recorder", "text/plain")
            resp.set_status(404)
            return
        resp.set_content(live_dump(dump, after, fmt), _CONTENT_TYPE[fmt])
        resp.set_status(200)
        if final is not None:
            final.entries_read(req.get_param("backend"))

    return handler


def status_dump(dump_pickle: Callable[..., bytes], exiting: bool = False) -> bytes:
    """The recorder's status only (PyTorch's dump without collectives: well under a millisecond),
    as JSON, with the ring buffer's size: what the sidecar polls every second to see which groups
    moved, and how soon their entries must be fetched before the buffer wraps. Without pg_config:
    the sidecar reads it with the entries, and it lists every group's members (~100 KB for a
    16384-rank default group), which this thread took 0.33-0.48 ms to encode, and the sidecar 42 µs to
    parse, every second."""
    raw = pickle.loads(dump_pickle(False, False, False))  # this process's own dump: plain data
    raw.pop("entries", None)
    raw.pop("pg_config", None)
    raw[BUFFER_SIZE_KEY] = buffer_size()
    if exiting:
        raw[EXITING_KEY] = True
    return json.dumps(raw, separators=(",", ":")).encode()


def buffer_size() -> int:
    """PyTorch's rule (FlightRecorder.hpp): the first of these set, else 2000."""
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        value = os.environ.get(name, "")
        if value.strip().isdecimal():
            return int(value)
    return 2000


def make_status_handler(dump_for: Callable[[str], Callable[..., bytes] | None],
                        final: FinalRead) -> Callable[[Any, Any], None]:
    """The worker-server handler around `status_dump`: `?backend=<recorder>`."""

    def handler(req: Any, resp: Any) -> None:
        final.status_asked()
        dump = dump_for(req.get_param("backend"))
        if dump is None:
            resp.set_content("no such recorder", "text/plain")
            resp.set_status(404)
            return
        resp.set_content(status_dump(dump, final.exiting), "application/json")
        resp.set_status(200)

    return handler


def make_recorders_handler(names: Callable[[], list[str]], torch_version: str) -> Callable[[Any, Any], None]:
    """The worker-server handler that lists the recorders worth polling (recorders.Recorders.names)."""

    def handler(req: Any, resp: Any) -> None:
        resp.set_content(json.dumps({"recorders": names(), "torch": torch_version}), "application/json")
        resp.set_status(200)

    return handler
