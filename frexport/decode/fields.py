"""The field rules of a Flight Recorder dump: how each raw value becomes a model value.

Two loops read entries: normalize.py (every format, to Entry objects) and fast_trace.py (the
common 2.10 shape, straight to analysis rows). Both take every field rule from here, so they
cannot drift apart; a property test checks that they build identical traces.

The variants PyTorch wrote over the years differ in small ways (tuple vs list, None vs 0, int
vs str). A value of the wrong type raises BadEntry (the entry is skipped and counted) or is
read as absent, as each rule says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any, TypeVar

from frexport.model.call_site import Frame, is_library_frame
from frexport.model.dump import DEFAULT_RECORDER, group_name
from frexport.model.world import MAX_WORLD

# The newest dump format this code knows field by field.
KNOWN_VERSION = (2, 10)

# Bounds that keep a hostile but small file from costing unbounded work:
# shared (memoized) sub-lists in a pickle can make a few bytes stand for a large structure.
MAX_ENTRIES = 1_000_000
MAX_FRAMES = 512
MAX_SIZE_ELEMENTS = 65_536  # dims summed over all tensors of one entry
MAX_DTYPES = 65_536
MAX_NAME = 4096  # profiling_name
MAX_DTYPE_LEN = 64  # a dtype's name is shorter

# The keys every 2.10 dump writes (pickle and JSON); one C-level call fetches them all.
V210_KEYS = (
    "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
    "time_created_ns", "state", "is_p2p", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
    "retired", "timeout_ms", "time_discovered_started_ns", "time_discovered_completed_ns", "thread_id",
    "thread_name",
)
get_v210 = itemgetter(*V210_KEYS)
# Read where present: duration_ms (NCCL with timing), frames (pickles with stacks).
OPTIONAL_KEYS = ("duration_ms", "frames")
# A stack frame's fields (Caches.frame_of) and the top-level key of the entries.
FRAME_KEYS = ("name", "filename", "line")
ENTRIES_KEY = "entries"
# The compiled scanner (_scan.c) takes every constant above from _scan_fields.h, which
# scripts/gen_scan_fields.py writes from this module; a unit test keeps the two equal.

EMPTY: tuple = ()
_NAME, _FILENAME, _LINE = FRAME_KEYS


class BadEntry(Exception):
    """A field of one entry is malformed: the entry is skipped, the dump is still read."""


def parse_version(text: Any) -> tuple[int, int] | None:
    """'2.10' -> (2, 10). Compared as integers: '2.10' is newer than '2.9'."""
    if not isinstance(text, str):
        return None
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(p.isdecimal() and len(p) <= 6 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config 'ranks' is a string "[0, 1, 2]" (older dumps: a list). "[]" means unknown, and so does a
    list with a member no job can have (model/world.py): a member 1000000000 sized the analysis' sets."""
    if isinstance(value, str):
        return _parse_ranks_text(value)
    if isinstance(value, (list, tuple)):
        if not value or not all(type(r) is int for r in value):
            return None
        ranks = tuple(value)
        return ranks if all(0 <= r < MAX_WORLD for r in ranks) else None
    return None


@lru_cache(maxsize=1024)  # every rank's dump repeats the same groups; a 4096-rank list costs ~1 ms to parse
def _parse_ranks_text(value: str) -> tuple[int, ...] | None:
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip()
    if not body:
        return None
    try:
        ranks = tuple(map(int, body.split(",")))
    except ValueError:  # also a member of over 4300 digits (int's own limit)
        return None
    return ranks if all(0 <= r < MAX_WORLD for r in ranks) else None


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# A duration the analysis' microsecond columns (int64) can hold: ~292,000 years. Longer is corrupt, and
# int(1e300 * 1000) overflowed the column (found by scripts/fuzz_scan.py).
MAX_DURATION_MS = 9e15


def in_int64(v: int) -> bool:
    """PyTorch's counters and timestamps are 64-bit: anything outside cannot be real, and would overflow
    the analysis' arrays, floats and metrics (a 400-digit sequence number)."""
    return INT64_MIN <= v <= INT64_MAX


def opt_int(v: Any) -> int | None:
    """An int, or an int written as a string; anything else, or outside 64 bits, is absent."""
    if type(v) is int:
        return v if in_int64(v) else None
    if isinstance(v, str) and len(v) <= 32:  # the bound keeps int() linear and within its digit limit
        try:
            parsed = int(v)
        except ValueError:  # '--1', '¹', 'x': a hostile or corrupt value is simply absent
            return None
        return parsed if in_int64(parsed) else None
    return None


def int_field(e: dict, key: str, default: int | None) -> int | None:
    """A required-shape int field: missing -> default, a string -> its value, another type -> BadEntry."""
    v = e.get(key)
    if type(v) is int:
        return v if in_int64(v) else default
    if v is None:
        return default
    if type(v) is str:
        parsed = opt_int(v)
        return default if parsed is None else parsed
    raise BadEntry(key)


def discovered_ns(v: Any) -> int | None:
    """time_discovered_*_ns: PyTorch writes None in pickles and 0 in JSON for "not yet"."""
    return v if type(v) is int and 0 < v <= INT64_MAX else None


def duration_ms(v: Any) -> float | None:
    """Only NCCL with timing writes it; an int is accepted, a negative or NaN value is absent."""
    if v is not None and type(v) is not float:
        v = float(v) if type(v) is int and in_int64(v) else None  # float(10**400) would raise
    return v if v is not None and 0 <= v < MAX_DURATION_MS else None  # NaN fails both; Infinity is absent too


def parse_profiling_name(name: str) -> tuple[str, str, int | None, int | None]:
    """'nccl:send 1->2' -> ('nccl', 'send', 1, 2); 'gloo:all_reduce' -> ('gloo', 'all_reduce', None, None)."""
    backend, sep, rest = name.partition(":")
    if not sep:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    src = dst = None
    meta = meta.strip()
    try:
        if op == "send" and "->" in meta:
            s, d = meta.split("->", 1)
            src, dst = int(s), int(d)
        elif op == "recv" and "<-" in meta:
            d, s = meta.split("<-", 1)
            # "recv 3<-?": a receive from any source (torch 2.15's hook): the source is unknown
            dst, src = int(d), (None if s.strip() == "?" else int(s))
    except ValueError:
        src = dst = None
    return backend, op, src, dst


def recorder_backend(backends: Iterable[str]) -> str:
    """The backend of the recorder that wrote a dump: one recorder, one backend, named in its ops'
    profiling names (gloo's, legacy NCCL's "nccl", a hooked backend's such as "nccl2"); "" when none
    of the sampled ops names one."""
    return next((b for b in backends if b), "")


def process_group(raw: Any) -> tuple[str, str]:
    """(name, desc) from a tuple/list (2.3+), a bare name (older), or nothing."""
    if type(raw) in (tuple, list) and len(raw) >= 1:
        name = raw[0]
        desc = raw[1] if len(raw) > 1 else ""
        if type(name) is str and type(desc) is str:
            return name, desc
        raise BadEntry("process_group")
    if type(raw) is str:
        return raw, ""
    if raw is None:
        return "", ""
    raise BadEntry("process_group")


class Caches:
    """Per-dump interning: real dumps repeat the same names, sizes and (memoized) frames."""

    __slots__ = ("names", "sizes", "dtypes", "frame", "stack", "stack_of_list", "pg", "groups", "tensors")

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str, int | None, int | None]] = {}
        self.sizes: dict[tuple, tuple] = {}
        self.dtypes: dict[Any, tuple] = {}
        # id(raw frame dict) -> (Frame, is a torch frame); the raw dump stays alive meanwhile
        self.frame: dict[int, tuple[Frame, bool]] = {}
        self.stack: dict[tuple[int, ...], tuple[tuple[Frame, ...], Frame | None]] = {}
        self.stack_of_list: dict[int, tuple[tuple[Frame, ...], Frame | None]] = {}  # id(raw frames list)
        self.pg: dict[Any, tuple[str, str]] = {}
        self.groups: dict[tuple[Any, str], tuple[str, str]] = {}  # (raw process group, backend) -> group()
        # (op name, group) -> (raw sizes and dtypes of its last entry, their converted tuples)
        self.tensors: dict[tuple, tuple[tuple, tuple]] = {}

    def profiling_name(self, pname: Any) -> tuple[str, str, int | None, int | None]:
        parsed = self.names.get(pname) if type(pname) is str else None
        if parsed is None:
            if type(pname) is not str or len(pname) > MAX_NAME:
                raise BadEntry("profiling_name")
            parsed = self.names[pname] = parse_profiling_name(pname)
        return parsed

    def group(self, raw: Any, backend: str) -> tuple[str, str]:
        """(name the group's ops are filed under, desc): `model.dump.group_name` of the entry's group
        and backend."""
        hashable = type(raw) is tuple or type(raw) is str
        got = self.groups.get((raw, backend)) if hashable else None
        if got is None:
            name, desc = self.process_group(raw)
            got = (name, desc) if backend == DEFAULT_RECORDER or not backend else (group_name(name, backend), desc)
            if hashable:
                self.groups[(raw, backend)] = got
        return got

    def process_group(self, raw: Any) -> tuple[str, str]:
        hashable = type(raw) is tuple or type(raw) is str
        pg = self.pg.get(raw) if hashable else None
        if pg is None:
            pg = process_group(raw)
            if hashable:
                self.pg[raw] = pg
        return pg

    def frame_of(self, raw: Any) -> tuple[Frame, bool]:
        hit = self.frame.get(id(raw))
        if hit is None:
            if type(raw) is not dict:
                raise BadEntry("frames")
            name, filename, line = raw.get(_NAME, ""), raw.get(_FILENAME, ""), raw.get(_LINE, 0)
            if type(name) is not str or type(filename) is not str or type(line) is not int:
                raise BadEntry("frames")
            fr = Frame(name, filename, line)
            hit = self.frame[id(raw)] = (fr, is_library_frame(fr))
        return hit


def tensors(key: tuple, in_sizes: Any, out_sizes: Any, in_dtypes: Any, out_dtypes: Any, c: Caches) -> tuple:
    """Sizes and dtypes of an entry. Entries of one op mostly repeat the previous one's shapes:
    comparing the raw lists with == (in C) is far cheaper than converting them again."""
    last = c.tensors.get(key)
    if last is not None:
        raw = last[0]
        if raw[0] == in_sizes and raw[1] == out_sizes and raw[2] == in_dtypes and raw[3] == out_dtypes:
            return last[1]
    out = (sizes(in_sizes, c), sizes(out_sizes, c), dtypes(in_dtypes, c), dtypes(out_dtypes, c))
    c.tensors[key] = ((in_sizes, out_sizes, in_dtypes, out_dtypes), out)
    return out


def sizes(raw: Any, c: Caches) -> tuple[tuple[int, ...], ...]:
    if type(raw) is list and len(raw) == 1:  # fast path: one tensor, the common case
        inner = raw[0]
        if type(inner) is list and len(inner) <= 16:
            try:
                hit = c.sizes.get((tuple(inner),))
            except TypeError:  # a list inside: unhashable, and no shape (found by the differential fuzz)
                raise BadEntry("sizes") from None
            if hit is not None:
                return hit
    if not raw:
        if raw is None or type(raw) in (list, tuple):
            return EMPTY
        raise BadEntry("sizes")
    if type(raw) is not list and type(raw) is not tuple:
        raise BadEntry("sizes")
    # A shape must be a sequence itself: tuple() would also turn a set, a str or bytes into "dims".
    if any(type(shape) is not list and type(shape) is not tuple for shape in raw):
        raise BadEntry("sizes")
    if len(raw) > MAX_SIZE_ELEMENTS or sum(map(len, raw)) > MAX_SIZE_ELEMENTS:
        raise BadEntry("sizes")
    key = tuple(map(tuple, raw))
    try:
        hit = c.sizes.get(key)
    except TypeError:  # a list or dict among the dims: a BadEntry on every path, not an exception of one
        raise BadEntry("sizes") from None
    if hit is None:
        for shape in key:
            for d in shape:
                if type(d) is not int or d < 0:
                    raise BadEntry("sizes")
        hit = c.sizes[key] = key
    return hit


def dtypes(raw: Any, c: Caches) -> tuple[str, ...]:
    if type(raw) is list and len(raw) == 1 and type(raw[0]) is str:  # fast path: one tensor, keyed by the name
        hit = c.dtypes.get(raw[0])
        if hit is not None:
            return hit
    if not raw:
        if raw is None or type(raw) in (list, tuple):
            return EMPTY
        raise BadEntry("dtypes")
    if type(raw) is not list and type(raw) is not tuple or len(raw) > MAX_DTYPES:
        raise BadEntry("dtypes")
    key = tuple(raw)
    if not all(type(d) is str for d in key):  # [["Float"]]: unhashable below, and no dtype
        raise BadEntry("dtypes")
    hit = c.dtypes.get(key)
    if hit is None:
        if not all(len(d) < MAX_DTYPE_LEN for d in key):
            raise BadEntry("dtypes")
        hit = c.dtypes[key] = key
        if len(key) == 1:
            c.dtypes[key[0]] = key
    return hit


def frames(raw: Any, c: Caches, keep: bool) -> tuple[tuple[Frame, ...], Frame | None]:
    """(the stack, innermost first, or () when not kept; the user's call site)."""
    if type(raw) is not list and type(raw) is not tuple:
        raise BadEntry("frames")
    whole = raw  # part of the raw dump, alive meanwhile: its id is its own (a cut copy's is not)
    if len(raw) > MAX_FRAMES:
        raw = raw[:MAX_FRAMES]
    if not keep:
        return EMPTY, user_frame(raw, c)
    # one list shared by reference (a memoized pickle): converted once. By the dump's own list: the id of
    # a cut copy is free again once it is dropped, and another entry's cut copy reused it (found by the
    # differential test of the compiled scanner's dumps, test_scanned_dump.py)
    hit = c.stack_of_list.get(id(whole))
    if hit is not None:
        return hit
    key = tuple(map(id, raw))
    hit = c.stack.get(key)
    if hit is None:
        stack = tuple(c.frame_of(f)[0] for f in raw)
        hit = c.stack[key] = (stack, user_frame(raw, c))
    c.stack_of_list[id(whole)] = hit  # the raw dump stays alive meanwhile: ids are not reused
    return hit


def user_frame(raw: list | tuple, c: Caches) -> Frame | None:
    """The innermost frame outside torch: where the user's code issued the op (else the innermost)."""
    cache = c.frame
    first = None
    for f in raw:
        hit = cache.get(id(f)) or c.frame_of(f)
        if not hit[1]:
            return hit[0]
        if first is None:
            first = hit[0]
    return first


def is_coalesced_marker(op: str) -> bool:
    """The entry that closes a coalesced group: `coalesced` (p2p batches) or `<OP>_coalesced`."""
    return op == "coalesced" or op.endswith("_coalesced")


T = TypeVar("T")


def coalesced_completions(items: Sequence[T], op: Callable[[T], str], group_key: Callable[[T], tuple],
                          settled: Callable[[T], bool]) -> list[tuple[int, int]]:
    """Ops inside a coalesced group (batch_isend_irecv, *_coalesced) are recorded without their own
    completion events: NCCL leaves them 'scheduled' and never retires them; only the group's closing
    entry completes. Returns the pairs (i, j): item i takes the completion (state, retired, start and
    completion times) of item j, the settled closing entry that follows it in its group (same process
    group, same p2p_seq_id for p2p, collective_seq_id otherwise: `group_key`)."""
    return coalesced_pairs([is_coalesced_marker(op(x)) for x in items], [group_key(x) for x in items],
                           [settled(x) for x in items])


def coalesced_pairs(markers: Sequence[bool], keys: Sequence[tuple], done: Sequence[bool]) -> list[tuple[int, int]]:
    """`coalesced_completions` on the items' properties given as sequences (the column scanner has
    them per kind of entry, without a call per item)."""
    pairs = []
    closing: dict[tuple, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        if markers[i]:
            closing[keys[i]] = i
        elif not done[i]:
            j = closing.get(keys[i])
            if j is not None and done[j]:
                pairs.append((i, j))
    return pairs
