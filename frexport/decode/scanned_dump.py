"""A pickle dump's `RankDump` (its entries as `Entry` objects) from the compiled scanner's columns.

The sidecar reads pickles too: dump files in the directories it watches (sources/dump_dir.py) and the
agent's pickles of peers' ranks (sources/peers.py), through read.decode_bytes. That takes this path
first, the same scanner `analyze` uses (scanned.columns), and falls back to the pure path
(safe_pickle + normalize) wherever it returns None: no extension, a dump outside the common 2.10
shape, or a kind a field rule refuses (the pure path then skips and counts that entry, or explains).
Where it answers, the dump equals normalize's entry for entry (a property test checks it): the same
field rules (fields.py), the same coalesced completion (normalize.complete_coalesced), and the top
level normalized by normalize itself.
"""

from __future__ import annotations

from frexport.decode import scanned
from frexport.decode.fields import (
    EMPTY,
    KNOWN_VERSION,
    MAX_ENTRIES,
    BadEntry,
    Caches,
    dtypes,
    is_coalesced_marker,
    parse_version,
    recorder_backend,
    sizes,
)
from frexport.decode.normalize import complete_coalesced, normalize, require_dump_fields
from frexport.model.call_site import Frame, is_library_frame
from frexport.model.dump import Entry, RankDump
from frexport.model.outcome import edges

_new_tuple = tuple.__new__


def dump_from_pickle(data: bytes, source: str, rank: int | None = None, dumped_at_ns: int | None = None,
                     keep_frames: bool = True, max_entries: int = MAX_ENTRIES,
                     recorder: str | None = None) -> RankDump | None:
    """normalize(loads_plain(data), ...) for a pickle of the common shape, or None (use that path)."""
    cols = scanned.columns(data)
    if cols is None:
        return None
    top, kinds, which, nums, dur, stacks, frames, threads = cols
    require_dump_fields(top, source)  # as normalize: the same keys, so the same verdict
    n = len(which)
    first = max(0, n - max_entries)  # normalize keeps the newest max_entries
    try:
        info = _kinds(kinds, stacks, frames, keep_frames)
    except BadEntry:
        return None
    k = scanned.N_INTS
    entries: list[Entry] = []
    append = entries.append
    for i in range(first, n):
        kind = info[which[i]]
        j = k * i
        started, completed, d = nums[j + 3], nums[j + 4], dur[i]
        append(_new_tuple(Entry, (
            nums[j + 5], kind[0], kind[1], kind[2], nums[j], nums[j + 1], nums[j + 6], *kind[3],
            nums[j + 2], started or None, completed or None, None if d != d else d, kind[4],
            *threads[nums[j + 7]], *kind[5])))
    if any(is_coalesced_marker(op) for _, op, _, _ in (kind[6] for kind in info)):
        entries = complete_coalesced(entries)
    head = normalize({**top, "entries": []}, source, "pickle", rank=rank, dumped_at_ns=dumped_at_ns,
                     size_bytes=len(data), recorder=recorder_backend(e.backend for e in edges(entries)) or recorder)
    notes = head.notes
    if first:  # where normalize says it: after the version's note, before the groups'
        at = _version_notes(top)
        notes = (*notes[:at], f"{n} entries: kept the newest {max_entries}", *notes[at:])
    return RankDump(rank=head.rank, source=source, format="pickle", version=head.version,
                    version_text=head.version_text, comm_lib_version=head.comm_lib_version,
                    pg_config=head.pg_config, pg_status=head.pg_status, entries=tuple(entries), notes=notes,
                    dumped_at_ns=dumped_at_ns, size_bytes=len(data))


def _version_notes(top: dict) -> int:
    """How many notes normalize writes about the version before the entries' (0 or 1)."""
    if "version" not in top:
        return 0
    version = parse_version(top["version"])
    return int(version is None or version > KNOWN_VERSION)


def _kinds(kinds: list, stacks: list, frames: list, keep_frames: bool) -> list[tuple]:
    """Per kind, the parts of its entries' Entry by the field rules: (pg_id, pg_name, pg_desc), (is_p2p,
    profiling name, backend, op, src, dst, sizes and dtypes, state, retired), timeout, (frames, call site),
    the parsed name. BadEntry where a rule refuses one (the pure path skips such entries)."""
    c = Caches()
    frame_info: dict[int, tuple[Frame, bool]] = {}
    sites: dict[int, tuple[tuple[Frame, ...], Frame | None]] = {}

    def frame(i: int) -> tuple[Frame, bool]:
        hit = frame_info.get(i)
        if hit is None:
            raw = frames[i]
            if raw is None:  # not a well-formed frame dict: fields.Caches.frame_of refuses it
                raise BadEntry("frames")
            fr = Frame(*raw)
            hit = frame_info[i] = (fr, is_library_frame(fr))
        return hit

    def stack_of(stack: int) -> tuple[tuple[Frame, ...], Frame | None]:  # fields.frames
        ids = stacks[stack]
        if keep_frames:
            held = [frame(i) for i in ids]
            return tuple(f for f, _ in held), next((f for f, lib in held if not lib), held[0][0])
        first = None
        for i in ids:  # fields.user_frame: frames after the call site are not looked at
            fr, lib = frame(i)
            if not lib:
                return EMPTY, fr
            if first is None:
                first = fr
        return EMPTY, first

    out = []
    for pg_name, pg_desc, pg_id, is_p2p, pname, state, retired, in_s, out_s, in_d, out_d, stack, timeout in kinds:
        parsed = c.profiling_name(pname)
        group = c.group((pg_name, pg_desc), parsed[0])
        tensors = (sizes(in_s, c), sizes(out_s, c), dtypes(in_d, c), dtypes(out_d, c))
        if stack >= 0:
            site = sites.get(stack)
            if site is None:
                site = sites[stack] = stack_of(stack)
        else:
            site = (EMPTY, None)
        out.append((pg_id, group[0], group[1], (is_p2p, pname, *parsed, *tensors, state, retired), timeout, site,
                    parsed))
    return out
