"""The bulk analyzer's fast path for JSON dumps: the text straight to columns, parsing only what varies.

`json.loads` builds every entry as a dict with every key and value (about 10 µs an entry), and the
analysis then reads a few numbers per entry plus, per distinct kind of entry, its group, op, sizes,
dtypes and state. In a real dump all but the numbers repeat from entry to entry, so this:

1. cuts every number that follows a colon out of the entries' text; what is left of an entry is
   its *skeleton* (each number replaced by a marker, `:` NUL);
2. converts all those numbers, checking that each is a JSON number, exactly as the full parse would,
   and giving it the same type. Steps 1-2 are the *cut*: compiled (`_scan.cut_json`, one pass over
   ASCII bytes) where the extension is built, else `_cut_py` (one `re.split`, then one `json.loads`
   of the numbers as a flat list); a property test checks both give the same answer;
3. decodes each distinct skeleton with `json.loads`, twice, with different numbers in place of the
   markers: the keys whose value changed between the two are the entry's numeric slots;
4. hands the columns to scanned.py's pipeline, the one the compiled pickle scanner feeds.

Why a success is exact: the text is cut only at string-blind places (a number after a colon, the
separator between entries), and every cut is checked by a full JSON parse of the pieces. An entry
split inside a string leaves a piece with an unterminated string, which does not parse; a number
cut from inside a string (or from a nested value) makes that value differ between the two parses
of its skeleton, which refuses the skeleton; the part of the document around the entries must parse
with a placeholder of ours as its top-level "entries". Each skeleton's pieces and numbers then
rebuild exactly the entry text the full parse reads, so the values are those json.loads gives.

Only ever accepts less: anything outside the common 2.10 shape (frames, pretty-printed text, odd
types, a number that is not a plain JSON number) returns None and the caller runs the plain path
(json.loads, fast_trace, normalize), which decodes, refuses or explains exactly as before. A
property test checks both paths give identical traces, hostile strings included.
"""

from __future__ import annotations

import json
import re
from array import array
from collections import Counter
from collections.abc import Callable
from itertools import accumulate, compress
from operator import itemgetter
from typing import AnyStr, Generic, cast

from frexport.decode.fields import (
    MAX_DURATION_MS,
    MAX_ENTRIES,
    V210_KEYS,
    BadEntry,
    discovered_ns,
    duration_ms,
    process_group,
)
from frexport.decode.scanned import trace_from_columns
from frexport.model.rank_trace import RankTrace

try:
    from frexport.decode._scan import cut_json as _compiled_cut
except ImportError:  # installed without a compiler (or an older build): _cut_py does it
    _compiled_cut = None  # type: ignore[assignment]  # (the optional extension's usual fallback)

_cut: Callable[[bytes, int, int, bool], tuple | None] | None = _compiled_cut


class _Unusual(Exception):
    pass


class _Syntax(Generic[AnyStr]):
    """The patterns and literals for one text type: ASCII dumps (what PyTorch writes) are read as bytes,
    without decoding them; anything else is decoded as json.loads decodes bytes, then read as str."""

    key: re.Pattern[AnyStr]
    number: dict[str, re.Pattern[AnyStr]]
    separator: dict[bool, AnyStr]
    backslash: AnyStr
    lbrace: AnyStr
    rbrace: AnyStr
    end: AnyStr
    marker: AnyStr
    nul: AnyStr
    comma: AnyStr
    empty: AnyStr
    lbracket: AnyStr
    rbracket: AnyStr
    placeholder: AnyStr
    escape: AnyStr
    digits: Callable[[int], AnyStr]

    def __init__(self, t: type[AnyStr]) -> None:
        def lit(s: str) -> AnyStr:
            return cast(AnyStr, s if t is str else s.encode())

        self.key = re.compile(lit(r'"entries"[ \t\n\r]*:[ \t\n\r]*\['))
        # A number after a colon, loosely (json.loads of them all checks JSON's grammar), in the writer's
        # spacing (json.dumps' ": " or PyTorch's ":"; ': ?' costs a third more): a number written
        # otherwise stays in its skeleton, a value of its kind. So do pg_id and timeout_ms, which are
        # per kind (the look-behinds cost nothing measurable; fewer numbers save their conversion).
        self.number = {sp: re.compile(lit(f':{sp}(?<!"pg_id":{sp})(?<!"timeout_ms":{sp})([-0-9][0-9.eE+-]*)'))
                       for sp in ("", " ")}
        self.separator = {True: lit("}, {"), False: lit("},{")}
        self.backslash, self.lbrace, self.rbrace, self.end = lit("\\"), lit("{"), lit("}"), lit("}]")
        self.marker, self.nul, self.comma, self.empty = lit(":\0"), lit("\0"), lit(","), lit("")
        self.lbracket, self.rbracket = lit("["), lit("]")
        self.placeholder, self.escape = lit('"\\u0001"'), lit("\\u0001")
        self.digits = cast(Callable[[int], AnyStr], str if t is str else b"%d".__mod__)


_BYTES, _STR = _Syntax(bytes), _Syntax(str)
_PLACEHOLDER = "\x01"  # the top-level "entries" of the text around them (see _columns)

# the number fields read per entry (the rest of V210_KEYS are read per kind)
_NUMBERS = ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
            "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "timeout_ms")
_INTS = ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns")
_NAN = float("nan")
_CHUNK = 8 << 20  # characters of entries cut at a time (a dump of 2000 entries is about 1.2 MB)


def trace_from_json(data: bytes, source: str, rank: int, dumped_at_ns: int | None,
                    size_bytes: int) -> RankTrace | None:
    """The trace of a JSON dump, or None: not the common shape, use the plain path."""
    try:
        if data.isascii():
            cols = _columns(data)
        else:
            cols = _columns(data.decode(json.detect_encoding(data), "surrogatepass"))
    except (_Unusual, BadEntry, ValueError, TypeError, OverflowError, RecursionError, KeyError, IndexError,
            MemoryError):
        # ValueError includes every JSONDecodeError and UnicodeDecodeError: the plain path explains; after
        # a MemoryError what this held is freed, and the plain path needs less than this did (or says so)
        return None
    if cols is None:
        return None
    top, kinds, which, seqs, p2p_seqs, created, started, completed, dur = cols
    return trace_from_columns(top, kinds, which, seqs, p2p_seqs, created, started, completed, dur, [], [],
                              source, "json", rank, dumped_at_ns, size_bytes)


def _columns(h: AnyStr) -> tuple | None:
    syn = _BYTES if isinstance(h, bytes) else _STR
    found = syn.key.search(h)
    if found is None or h[found.start() - 1:found.start()] == syn.backslash:
        return None  # no entries (the plain path is cheap), or the first look-alike is inside a string
    a = found.end() - 1  # the '['
    e = h.rfind(syn.end)  # the last '}]': the end of the entries, or a look-alike the parses refuse
    if e < a or h[a + 1:a + 2] != syn.lbrace:
        return None
    # The document around the entries, with our placeholder for them: no other value can equal it when
    # the text spells \u0001 only once (JSON has no other way to write U+0001 inside a string).
    head = h[:a] + syn.placeholder + h[e + 2:]
    if head.count(syn.escape) != 1:
        return None
    top = json.loads(head)
    if type(top) is not dict or top.get("entries") != _PLACEHOLDER:
        return None
    first_close = h.find(syn.rbrace, a)
    spaced = h[first_close:first_close + 4] == syn.separator[True]  # json.dumps' spacing, or PyTorch's none
    cut = (_cut if isinstance(h, bytes) and _cut is not None else _cut_py)(h, a + 2, e, spaced)  # (syn is _BYTES)
    if cut is None:
        return None  # a number that is not a JSON number: the plain path explains
    which_skel: list[int]
    values, which_skel, index = cut
    if len(which_skel) > MAX_ENTRIES:
        return None  # normalize keeps the newest: the general path's business
    if len(index) > 64 + len(which_skel) // 4:
        return None  # mostly distinct entries (or numbers not cut): two parses per kind cost more than one each
    reps: list[tuple[dict, tuple[str, ...]]] = [_skeleton(s, syn) for s in index]
    counts = list(map([len(slots) for _, slots in reps].__getitem__, which_skel))
    if sum(counts) != len(values):
        return None  # a NUL in the text (not valid JSON there) made a marker of its own
    layout, values = _rows(reps, which_skel, counts, values)
    m = len(layout)
    cols: dict[str, list] = {key: values[layout.index(key)::m] if key in layout else
            list(map([_CONVERT.get(key, _same)(rep.get(key)) for rep, _ in reps].__getitem__, which_skel))
            for key in _NUMBERS}
    for key in ("record_id", "op_id"):
        array("q", cols[key])  # only checked: a float, or over 64 bits, is fast_trace's _Unusual
    return (top, *_kinds(reps, which_skel, cols), array("q", cols["collective_seq_id"]),
            array("q", cols["p2p_seq_id"]), array("q", cols["time_created_ns"]),
            _discovered(cols["time_discovered_started_ns"]), _discovered(cols["time_discovered_completed_ns"]),
            _durations(cols["duration_ms"]))


def _rows(reps: list, which: list[int], counts: list[int], values: list) -> tuple[tuple[str, ...], list]:
    """The numbers as rows of one layout (the slots of most entries, then any other slot of _NUMBERS):
    each entry of another layout (an unfinished one without duration_ms) is rebuilt, with its kind's
    value (converted) where it has no slot; the rows of the others are copied as they are."""
    per_layout: Counter = Counter()
    for k, c in Counter(which).items():
        per_layout[reps[k][1]] += c
    main = per_layout.most_common(1)[0][0]
    layout = main + tuple(dict.fromkeys(key for _, slots in reps for key in slots
                                        if key in _NUMBERS and key not in main))
    odd = [slots != layout for _, slots in reps]
    if not any(odd):
        return layout, values
    # per kind of another layout: its numbers, then its values where it has no slot, picked in layout order
    recipes = {}
    for k, (rep, slots) in enumerate(reps):
        if odd[k]:
            missing = [key for key in layout if key not in slots]
            fill = [_CONVERT.get(key, _same)(rep.get(key)) for key in missing]
            picks = [slots.index(key) if key in slots else len(slots) + missing.index(key) for key in layout]
            recipes[k] = (len(slots), fill, itemgetter(*picks) if len(picks) > 1 else _one(picks))
    offsets = list(accumulate(counts, initial=0))
    out: list = []
    done = 0
    for i in compress(range(len(which)), map(odd.__getitem__, which)):
        at = offsets[i]
        out += values[done:at]
        count, fill, pick = recipes[which[i]]
        done = at + count
        out += pick(values[at:done] + fill)
    out += values[done:]
    return layout, out


def _one(picks: list[int]) -> Callable[[list], tuple]:
    """itemgetter of a single index returns the item, not a 1-tuple."""
    return lambda row: tuple(row[p] for p in picks)


def _cut_py(h: AnyStr, start: int, end: int, spaced: bool) -> tuple[list, list[int], dict] | None:
    """The numbers of the entries h[start:end] (their text without the outer braces), in order and
    converted as json.loads converts them; each entry's skeleton as an index into the distinct
    skeletons (dict: skeleton -> index, in order); None where a number is not a JSON number. A chunk at
    a time, cut at a separator (where splitting it all would cut too), so that the pieces of one chunk
    only are alive at once. The compiled _scan.cut_json gives the same answer, faster (bytes only)."""
    syn = _BYTES if isinstance(h, bytes) else _STR
    number, sep = syn.number[" " if spaced else ""], syn.separator[spaced]
    numbers: list = []
    which: list[int] = []
    index: dict = {}
    while start <= end:
        stop = h.find(sep, start + _CHUNK, end) if end - start > _CHUNK else -1
        stop = end if stop < 0 else stop
        parts = number.split(h[start:stop])  # [text, number, text, number, ..., text]
        numbers += parts[1::2]
        skeletons = syn.marker.join(parts[0::2]).split(sep)  # one per entry
        del parts
        for k in dict.fromkeys(skeletons):
            if k not in index:
                index[k] = len(index)
        which += map(index.__getitem__, skeletons)
        start = stop + len(sep)
    try:
        values = json.loads(syn.lbracket + syn.comma.join(numbers) + syn.rbracket)
    except ValueError:
        return None
    return values, which, index


def _skeleton(s: AnyStr, syn: _Syntax[AnyStr]) -> tuple[dict, tuple[str, ...]]:
    """An entry's values with 0..m-1 in its m slots, and the keys of its slots in order (the numbers
    are its values there). Raises _Unusual where a slot is not a top-level value of its own."""
    pieces = s.split(syn.nul)
    m = len(pieces) - 1
    texts = [pieces[0] + syn.empty.join(syn.digits(j + shift) + p for j, p in enumerate(pieces[1:]))
             for shift in (0, m)]
    one, two = (json.loads(syn.lbrace + t + syn.rbrace) for t in texts)
    if type(one) is not dict or type(two) is not dict or one.keys() != two.keys():
        raise _Unusual
    slots: list[str | None] = [None] * m
    for key, v in one.items():
        w = two[key]
        if type(v) is type(w) and (v == w or v != v and w != w):
            continue  # the same both times: part of the kind
        if type(v) is not int or type(w) is not int or not 0 <= v < m or w != v + m or slots[v] is not None:
            raise _Unusual  # a number cut from a string or a nested value
        slots[v] = key
    if None in slots:
        raise _Unusual
    return one, tuple(slots)  # type: ignore[arg-type]


def _kinds(reps: list, which_skel: list[int], cols: dict) -> tuple[list, array]:
    """The kinds as _scan.scan gives them (group, pg_id, is_p2p, profiling name, state, retired, sizes,
    dtypes, stack, timeout) in the order of their first entries, and each entry's kind: a skeleton's,
    or, where pg_id or timeout_ms is a number of its own (another writer's spacing), one per value."""
    for rep, slots in reps:
        _check_kind(rep, slots)
    per_entry = any("pg_id" in slots or "timeout_ms" in slots for _, slots in reps)
    if per_entry:
        pg_ids, timeouts = cols["pg_id"], cols["timeout_ms"]
        keys = list(zip(which_skel, pg_ids, timeouts))
    else:
        pg_ids, timeouts = [rep["pg_id"] for rep, _ in reps], [rep["timeout_ms"] for rep, _ in reps]
        keys = list(zip(range(len(reps)), pg_ids, timeouts))
    array("q", pg_ids)  # in 64 bits, not a float
    known = [t for t in timeouts if t is not None] if None in timeouts else timeouts
    if not set(map(type, known)) <= {int}:
        raise _Unusual  # fast_trace reads None or an int
    array("q", known)
    index = dict.fromkeys(keys)
    kinds = []
    for i, key in enumerate(index):
        index[key] = i
        rep = reps[key[0]][0]
        pg = process_group(rep["process_group"])
        kinds.append((pg[0], pg[1], key[1], rep["is_p2p"], rep["profiling_name"], rep["state"], rep["retired"],
                      rep["input_sizes"], rep["output_sizes"], rep["input_dtypes"], rep["output_dtypes"], -1,
                      key[2]))
    if not per_entry:
        return kinds, array("i", which_skel)  # one kind per skeleton
    return kinds, array("i", map(index.__getitem__, keys))


def _check_kind(rep: dict, slots: tuple[str, ...]) -> None:
    """The types fast_trace._rows accepts (else it takes the general path: so must we)."""
    if not all(k in rep for k in V210_KEYS) or "frames" in slots or rep.get("frames"):
        raise _Unusual  # a missing field, or frames (the JSON handlers write none; a slot's 0 is not its value)
    for key in _INTS:
        if key not in slots and type(rep[key]) is not int:
            raise _Unusual
    if type(rep["is_p2p"]) is not bool or type(rep["retired"]) is not bool or type(rep["state"]) is not str:
        raise _Unusual
    if type(rep["profiling_name"]) is not str or type(rep["thread_name"]) is not str \
            or type(rep["thread_id"]) is not str:
        raise _Unusual
    timeout = rep["timeout_ms"]
    if "timeout_ms" not in slots and timeout is not None and type(timeout) is not int:
        raise _Unusual


def _same(v: object) -> object:
    return v


def _discovered_ns(v: object) -> int:
    """fields.discovered_ns, with 0 for None (the columns' unknown)."""
    return discovered_ns(v) or 0


def _duration(v: object) -> float:
    """fields.duration_ms, with NaN for None (the columns' unknown)."""
    d = duration_ms(v)
    return _NAN if d is None else d


# a kind's value where it has no slot, as the columns hold it
_CONVERT = {"time_discovered_started_ns": _discovered_ns, "time_discovered_completed_ns": _discovered_ns,
            "duration_ms": _duration}


def _discovered(col: list) -> array:
    try:  # ints from JSON numbers or _discovered_ns: most often all of them positive
        out = array("q", col)
        if not out or min(out) >= 0:
            return out
    except (TypeError, OverflowError):  # a float: not an int, so unknown
        pass
    return array("q", map(_discovered_ns, col))


def _durations(col: list) -> array:
    try:  # float() of each: what duration_ms does to an int in 64 bits; a larger one is over the bound anyway
        out = array("d", col)
    except (TypeError, OverflowError):
        out = array("d", map(_duration, col))
    return array("d", [d if 0 <= d < MAX_DURATION_MS else _NAN for d in out])
