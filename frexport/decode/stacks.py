"""Read the Python stacks a bundle or `frexport snapshot --stacks` saved: faulthandler's
`dump_traceback` text (`stacks/rank_<r>.traceback.txt`), one block per thread, innermost frame first:

    Thread 0x00007fe87afbdb80 (most recent call first):
      File "/job/train.py", line 8 in load_batch
      File "/job/train.py", line 17 in train_step

and py-spy's `dump` (`stacks/rank_<r>.pyspy_dump.txt`, PyTorch's `pyspy_dump` handler or py-spy run
by hand), whose frames are `    recv (torch/distributed/distributed_c10d.py:2799)` and which, with
`--locals`, lists each frame's arguments: the peer a send or recv waits for (`dst: 0`), which no other
record holds (gloo records no point-to-point op).

The text comes from the ranks, so it is parsed, never evaluated; files and lines are bounded.
This is the one parser of stacks: `frexport analyze`, the sidecar's bundles and the job view's
(frexport/evidence/) all read a rank's text here, so they see the same threads.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from frexport.model.call_site import Frame

_MAX_BYTES = 4 << 20
_MAX_FRAMES = 512  # per thread
# faulthandler's headers: one per thread with all_threads (PyTorch's handler), `Stack` without
_HEADER = re.compile(r"^((Current thread|Thread) 0x[0-9a-fA-F]+|Stack \(most recent call first\))")
# faulthandler writes `line 8 in f`; traceback-style text has `line 8, in f`
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]{1,1024})", line (?P<line>\d{1,9}),? in (?P<name>\S{1,256})')
_CALL = re.compile(r"([A-Za-z_][\w.]{0,120})\s*\(")


def parse_traceback(text: str) -> list[tuple[Frame, ...]]:
    """Each thread's frames, innermost first; threads without a Python frame are left out."""
    threads: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in text.splitlines():
        if _HEADER.match(line):
            current = []
            threads.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None and len(current) < _MAX_FRAMES:
            current.append(Frame(m["name"], m["file"], int(m["line"])))
    return [tuple(t) for t in threads if t]


_PYSPY_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \([\w+ ]{1,64}\)(?:: "(?P<name>[^"]{0,256})")?')
_PYSPY_FRAME = re.compile(r"^ {4}(?P<name>\S[^()]{0,256}?) \((?P<file>[^()]{1,1024}):(?P<line>\d{1,9})\)\s*$")
_PYSPY_ARG = re.compile(r"^ {12}(?P<key>\w{1,64}): (?P<value>.{0,256})$")
Args = dict[str, str]  # a frame's arguments as py-spy printed them (repr text, never evaluated)


def parse_pyspy(text: str) -> tuple[list[tuple[Frame, ...]], list[tuple[Args, ...]]]:
    """Each thread's frames, innermost first, and each frame's arguments (empty without --locals).
    The main thread comes first, as in faulthandler's text the thread that runs the script does."""
    threads: list[tuple[list[Frame], list[Args], bool]] = []
    section = None
    for line in text.splitlines():
        m = _PYSPY_THREAD.match(line)
        if m:
            threads.append(([], [], m["name"] == "MainThread"))
            continue
        if not threads or len(threads[-1][0]) >= _MAX_FRAMES:
            continue
        m = _PYSPY_FRAME.match(line)
        if m:
            threads[-1][0].append(Frame(m["name"], m["file"], int(m["line"])))
            threads[-1][1].append({})
            section = None
            continue
        stripped = line.strip()
        if stripped in ("Arguments:", "Locals:"):
            section = stripped
            continue
        m = _PYSPY_ARG.match(line)
        if m and section == "Arguments:" and threads[-1][1]:
            threads[-1][1][-1][m["key"]] = m["value"].strip()
    threads.sort(key=lambda t: not t[2])
    return [tuple(f) for f, _, _ in threads if f], [tuple(a) for f, a, _ in threads if f]


def _api_call(frames: list[tuple[Frame, ...]], args: list[tuple[Args, ...]]) -> tuple[str, Args] | None:
    """The torch.distributed function the main thread is in (the outermost frame of distributed_c10d.py:
    the API the user called, not its helpers) and the arguments py-spy printed for it."""
    if not frames:
        return None
    for frame, a in reversed(list(zip(frames[0], args[0]))):
        if frame.filename.endswith("distributed_c10d.py"):
            return frame.name, a
    return None


class StackFiles(NamedTuple):
    threads: dict[int, list[tuple[Frame, ...]]]  # rank -> its threads
    calls: dict[int, tuple[str, Args]]  # rank -> the torch.distributed call its main thread is in, with arguments
    read: dict[str, int]  # path -> the rank it was read as
    notes: list[str]


def scan_stacks(directory: str) -> StackFiles:
    """The Python stacks beside a directory's dumps, found by what they are: every file of its `stacks/`
    folder, and every text file (`.txt`, `.log`, `.out`, `.err`) beside the dumps, whose content is
    faulthandler's `dump_traceback` text or py-spy's `dump`, is the stack of the rank its name holds
    (`rank_3.traceback.txt`, `stacks_3.txt`, `host-a.rank3.log`: an explicit `rank<N>`, else the one
    number in the name). One that names no rank, or several, is noted with how to name it. Where a
    rank has both kinds, faulthandler's frames (full file names) are its threads and py-spy's give the
    call's arguments; of one kind, the `stacks/` folder's file first."""
    threads: dict[int, list[tuple[Frame, ...]]] = {}
    calls: dict[int, tuple[str, Args]] = {}
    spied: dict[int, list[tuple[Frame, ...]]] = {}
    read: dict[str, int] = {}
    notes: list[str] = []
    budget = _MAX_TOTAL_BYTES
    for path in _candidates(directory):
        try:
            with open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
                if not _LOOKS_LIKE_STACKS.search(head):
                    continue  # a log, a config: not read further
                if budget <= 0:
                    notes.append(f"{path}: not read: the stack files beside the dumps passed "
                                 f"{_MAX_TOTAL_BYTES >> 20} MiB")
                    break
                data = head + f.read(_MAX_BYTES - len(head))
        except OSError:
            continue
        budget -= len(data)
        text = data.decode(errors="replace")
        frames = parse_traceback(text)
        frame_args: list[tuple[Args, ...]] = []
        if not frames:
            frames, frame_args = parse_pyspy(text)
        if not frames:
            continue  # not a stack dump: a log, a config
        rank = _rank_of(os.path.basename(path))
        if rank is None:
            notes.append(f"{path}: a Python stack dump whose name holds no rank number (or several): not read; "
                         "name it stacks_<rank>.txt")
            continue
        read[path] = rank
        if frame_args:  # py-spy's
            spied.setdefault(rank, frames)
            call = _api_call(frames, frame_args)
            if call is not None:
                calls.setdefault(rank, call)
        else:
            threads.setdefault(rank, frames)
    for rank, frames in spied.items():
        threads.setdefault(rank, frames)
    return StackFiles(threads, calls, read, notes)


def read_stack_dir(directory: str) -> tuple[dict[int, list[tuple[Frame, ...]]], dict[int, tuple[str, Args]]]:
    """(rank -> threads, rank -> the torch.distributed call its main thread is in, with its arguments):
    `scan_stacks` without what it read and noted."""
    found = scan_stacks(directory)
    return found.threads, found.calls


_STACK_TEXT = (".txt", ".log", ".out", ".err")
_SNIFF_BYTES = 64 << 10
_MAX_TOTAL_BYTES = 256 << 20  # stack text read per directory: a planted directory cannot make it read more
# a faulthandler thread header or py-spy's, within the first bytes
_LOOKS_LIKE_STACKS = re.compile(rb"(?m)^(?:(?:Current thread|Thread) (?:0x)?[0-9a-fA-F]+"
                                rb"|Stack \(most recent call first\))")
_MAX_CANDIDATES = 65536  # files looked into per directory: a hostile one holds millions
_EXPLICIT_RANK = re.compile(r"rank[_-]?(\d{1,7})(?!\d)", re.IGNORECASE)
_NUMBER = re.compile(r"\d{1,7}")


def _candidates(directory: str) -> list[str]:
    """Every regular file of `stacks/`, then the text files beside the dumps (never followed links)."""
    out: list[str] = []
    for folder, any_name in ((os.path.join(directory, "stacks"), True), (directory, False)):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if len(out) >= _MAX_CANDIDATES:
                return out
            if (any_name or e.name.lower().endswith(_STACK_TEXT)) and e.is_file(follow_symlinks=False):
                out.append(e.path)
    return out


def _rank_of(name: str) -> int | None:
    """The rank a stack file's name holds: an explicit `rank<N>`, else its one number (the name before
    its first dot: `stacks_3.txt`, `rank_3.pyspy_dump.txt`); None for none or several."""
    explicit = _EXPLICIT_RANK.findall(name)
    if explicit:
        return int(explicit[-1]) if len(set(explicit)) == 1 else None
    numbers = _NUMBER.findall(name.split(".", 1)[0])
    return int(numbers[0]) if len(numbers) == 1 else None


def rank_threads(texts: dict[str, str]) -> list[tuple[Frame, ...]]:
    """A rank's threads from the stack texts fetched for it, by kind (a bundle's
    `stacks/rank_<r>.<kind>.txt`: "traceback", "pyspy_dump"): faulthandler's where they hold a Python
    frame, else py-spy's, as `read_stack_dir` prefers them."""
    threads = parse_traceback(texts.get("traceback", "")[:_MAX_BYTES])
    return threads or parse_pyspy(texts.get("pyspy_dump", "")[:_MAX_BYTES])[0]


def read_stack_dirs(paths: list[str]) -> StackFiles:
    """`scan_stacks` of every directory among `paths` (files are skipped), later ones winning."""
    out = StackFiles({}, {}, {}, [])
    for p in paths:
        if os.path.isdir(p):
            found = scan_stacks(p)
            out.threads.update(found.threads)
            out.calls.update(found.calls)
            out.read.update(found.read)
            out.notes.extend(found.notes)
    return out


def read_stacks(directory: str) -> dict[int, list[tuple[Frame, ...]]]:
    """rank -> threads, from `<directory>/stacks/` (none when there are none): see `read_stack_dir`."""
    return read_stack_dir(directory)[0]


def callee(frame: Frame) -> str | None:
    """What the line calls (`time.sleep` for `time.sleep(0.5)`), when its source file is readable
    here (analyzed on the training host, or the same image): the stack names no C function."""
    if not frame.filename.endswith(".py") or frame.line < 1:
        return None
    try:
        if os.path.getsize(frame.filename) > _MAX_BYTES:
            return None
        with open(frame.filename, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == frame.line:
                    calls = _CALL.findall(text.split("#", 1)[0])
                    return calls[0] if calls else None
    except OSError:
        return None
    return None
