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

from frexport.model.call_site import Frame

_MAX_BYTES = 4 << 20
_MAX_FRAMES = 512  # per thread
# faulthandler's headers: one per thread with all_threads (PyTorch's handler), `Stack` without
_HEADER = re.compile(r"^((Current thread|Thread) 0x[0-9a-fA-F]+|Stack \(most recent call first\))")
# faulthandler writes `line 8 in f`; traceback-style text has `line 8, in f`
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]{1,1024})", line (?P<line>\d{1,9}),? in (?P<name>\S{1,256})')
_NAME = re.compile(r"^rank_(\d{1,7})(\.traceback)?\.txt$")  # bundles, snapshot --stacks; captured fixtures
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
_PYSPY_NAME = re.compile(r"^rank_(\d{1,7})\.pyspy_dump\.txt$")
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


def read_stack_dir(directory: str) -> tuple[dict[int, list[tuple[Frame, ...]]], dict[int, tuple[str, Args]]]:
    """(rank -> threads, rank -> the torch.distributed call its main thread is in, with its arguments)
    from `<directory>/stacks/`: faulthandler text (`rank_<r>.traceback.txt`, captured fixtures'
    `rank_<r>.txt`) and py-spy dumps (`rank_<r>.pyspy_dump.txt`). Where a rank has both, faulthandler's
    frames (full file names) are its threads and py-spy's give the call's arguments."""
    threads: dict[int, list[tuple[Frame, ...]]] = {}
    args: dict[int, tuple[str, Args]] = {}
    spied: dict[int, list[tuple[Frame, ...]]] = {}
    folder = os.path.join(directory, "stacks")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return threads, args
    for name in names:
        m, p = _NAME.search(name), _PYSPY_NAME.search(name)
        path = os.path.join(folder, name)
        if not (m or p) or os.path.islink(path):
            continue
        try:
            with open(path, "rb") as f:
                text = f.read(_MAX_BYTES).decode(errors="replace")
        except OSError:
            continue
        if m:
            parsed = parse_traceback(text)
            if parsed:
                threads[int(m.group(1))] = parsed
        else:
            assert p is not None  # (for mypy) m or p matched the name
            frames, frame_args = parse_pyspy(text)
            if frames:
                spied[int(p.group(1))] = frames
                call = _api_call(frames, frame_args)
                if call is not None:
                    args[int(p.group(1))] = call
    for rank, frames in spied.items():
        threads.setdefault(rank, frames)
    return threads, args


def rank_threads(texts: dict[str, str]) -> list[tuple[Frame, ...]]:
    """A rank's threads from the stack texts fetched for it, by kind (a bundle's
    `stacks/rank_<r>.<kind>.txt`: "traceback", "pyspy_dump"): faulthandler's where they hold a Python
    frame, else py-spy's, as `read_stack_dir` prefers them."""
    threads = parse_traceback(texts.get("traceback", "")[:_MAX_BYTES])
    return threads or parse_pyspy(texts.get("pyspy_dump", "")[:_MAX_BYTES])[0]


def read_stack_dirs(paths: list[str]) -> tuple[dict[int, list[tuple[Frame, ...]]], dict[int, tuple[str, Args]]]:
    """`read_stack_dir` of every directory among `paths` (files are skipped), later ones winning."""
    threads: dict[int, list[tuple[Frame, ...]]] = {}
    calls: dict[int, tuple[str, Args]] = {}
    for p in paths:
        if os.path.isdir(p):
            more, args = read_stack_dir(p)
            threads.update(more)
            calls.update(args)
    return threads, calls


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
