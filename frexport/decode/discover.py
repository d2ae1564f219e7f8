"""Find Flight Recorder dump files and the rank each belongs to.

PyTorch names a dump `<prefix><global rank>`. In practice directories also
hold JSON twins (`trace_0.json`), host names or attempt numbers inside names,
subdirectories per attempt, temp files of writes in progress, and unrelated
files. Rules, in order:
- a name with an explicit `rank<N>` / `rank_<N>` / `rank-<N>` gives N;
  otherwise the trailing digits of the name (extension stripped) are the rank;
- files are grouped into families by their name with every digit run masked,
  so `trace_0`, `trace_0.json` and `host7_trace_40` style names group sensibly;
  without `--prefix` the family covering the most ranks is used, the others are
  skipped with a note;
- several files for one rank: the newest dump wins (load.py reads their events); a pickle beats its JSON twin
  (it carries stack frames); the rest stay as fallbacks if the first is unreadable.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_EXTENSIONS = (".json", ".pkl", ".pickle")
_PARTIAL_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".swp", "~", ".lock")
# Files that sit next to dumps but never are one (logs, stacks, configs, scripts).
_NOT_DUMPS = (".txt", ".log", ".md", ".yaml", ".yml", ".py", ".sh", ".csv", ".html", ".png", ".out", ".err")
_EXPLICIT_RANK = re.compile(r"rank[_-]?(\d{1,7})(?!\d)", re.IGNORECASE)
_TRAILING_DIGITS = re.compile(r"^(|.*\D)(\d{1,7})$")
_DIGITS = re.compile(r"\d+")
_SAME_DUMP_WINDOW_NS = 60 * 1_000_000_000  # files of one rank written this close together are one dump


@dataclass(frozen=True)
class DumpFile:
    path: str
    rank: int
    family: str  # the name with digit runs masked, e.g. "trace_#"
    fmt_hint: str | None  # from the extension; the decoder sniffs the content anyway
    mtime_ns: int


@dataclass
class Discovery:
    by_rank: dict[int, list[DumpFile]] = field(default_factory=dict)  # preferred candidate first
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    notes: list[str] = field(default_factory=list)


def not_a_dump_type(name: str) -> bool:
    """Files that sit next to dumps but never are one (logs, stacks, configs): by their extension."""
    return name.lower().endswith(_NOT_DUMPS)


def default_locations(env: dict[str, str] | None = None) -> list[str]:
    """Where PyTorch writes dumps when nobody says otherwise, as path prefixes."""
    env = dict(os.environ if env is None else env)
    out = []
    for var in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        if env.get(var):
            out.append(env[var])
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME", os.path.expanduser("~")), ".cache")
    out += [
        os.path.join(cache, "torch", "comm_lib_trace_rank_"),
        os.path.join(cache, "torch", "nccl_trace_rank_"),
        "/tmp/nccl_trace_rank_",
    ]
    return out


def parse_name(name: str) -> tuple[int, str, str | None] | None:
    """File name -> (rank, family, format hint), or None if the name carries no rank."""
    stem, hint = name, None
    for ext in _EXTENSIONS:
        if stem.lower().endswith(ext):
            stem, hint = stem[: -len(ext)], ("json" if ext == ".json" else "pickle")
            break
    explicit = list(_EXPLICIT_RANK.finditer(stem))
    m: re.Match[str] | None
    if explicit:
        m = explicit[-1]
        rank, start, end = int(m.group(1)), m.start(1), m.end(1)
    else:
        m = _TRAILING_DIGITS.match(stem)
        if not m:
            return None
        rank, start, end = int(m.group(2)), m.start(2), m.end(2)
    family = _DIGITS.sub("#", stem[:start]) + "#" + _DIGITS.sub("#", stem[end:])
    return rank, family, hint


def discover(paths: list[str], prefix: str | None = None, follow_symlinks: bool = False) -> Discovery:
    found = Discovery()
    candidates: list[DumpFile] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            _walk(path, prefix, follow_symlinks, candidates, found)
        elif path.is_file():
            _consider(path, prefix, candidates, found, explicit=True)
        elif path.parent.is_dir():  # a PyTorch-style path prefix, e.g. /tmp/nccl_trace_rank_
            for child in sorted(path.parent.iterdir()):
                if child.name.startswith(path.name) and (follow_symlinks or not child.is_symlink()):
                    _consider(child, prefix or path.name, candidates, found)
        else:
            found.skipped.append((raw, "no such file or directory"))
    _choose(candidates, prefix, found)
    return found


# `frexport snapshot` writes a rank's other recorders (model/recorders.py: gloo's beside nccl2's, say)
# into recorder-<name>/ beside the first: the same ranks, other groups. Read with the first, their
# files would compete with its own as "several files of one rank": each is a dump directory of its own,
# which `frexport analyze` reads beside this one and joins rank by rank (cli/analyze_jobs.py).
RECORDER_DIR = "recorder-"


def _walk(root: Path, prefix: str | None, follow: bool, out: list[DumpFile], found: Discovery) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow):
        others = [d for d in dirnames if d.startswith(RECORDER_DIR)]
        if others and Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if not d.startswith(RECORDER_DIR)]
            found.notes.append(f"{', '.join(sorted(others))}: the ranks' other Flight Recorders, each a dump "
                               f"directory of its own (frexport analyze {root} reads them with it)")
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_symlink() and not follow:
                found.skipped.append((str(p), "symbolic link (not followed; use --follow-symlinks)"))
                continue
            _consider(p, prefix, out, found)


def _consider(p: Path, prefix: str | None, out: list[DumpFile], found: Discovery, explicit: bool = False) -> None:
    name = p.name
    if name.startswith(".") and not explicit:
        return  # hidden files: editor state, our own atomic-write temp files
    if name.lower().endswith(_PARTIAL_SUFFIXES):
        found.skipped.append((str(p), "temporary or partial file (a write in progress)"))
        return
    if name.lower().endswith(_NOT_DUMPS) and not explicit:
        found.skipped.append((str(p), "not a dump (file type)"))
        return
    if prefix is not None and not name.startswith(prefix):
        if not explicit:
            found.skipped.append((str(p), f"name does not start with prefix {prefix!r}"))
            return
    parsed = parse_name(name[len(prefix):] if prefix and name.startswith(prefix) else name)
    if parsed is None:
        found.skipped.append((str(p), "name carries no rank number: not a dump"))
        return
    rank, family, hint = parsed
    if prefix:
        family = prefix + family
    try:
        st = p.stat()
    except OSError as exc:
        found.skipped.append((str(p), f"cannot stat: {exc.strerror}"))
        return
    out.append(DumpFile(str(p), rank, family, hint, st.st_mtime_ns))


def _choose(candidates: list[DumpFile], prefix: str | None, found: Discovery) -> None:
    if not candidates:
        return
    families: dict[str, set[int]] = {}
    for c in candidates:
        families.setdefault(c.family, set()).add(c.rank)
    chosen = max(families, key=lambda f: (len(families[f]), f))
    for fam in sorted(families):
        if fam != chosen:
            found.notes.append(
                f"skipped {sum(1 for c in candidates if c.family == fam)} files named like {fam!r} "
                f"(another dump family than {chosen!r}; use --prefix to pick it)")
    by_rank: dict[int, list[DumpFile]] = {}
    for c in candidates:
        if c.family == chosen:
            by_rank.setdefault(c.rank, []).append(c)
        else:
            found.skipped.append((c.path, f"another dump family ({c.family!r})"))
    several = []
    for rank, files in by_rank.items():
        newest = max(f.mtime_ns for f in files)
        # Same dump window first (pickle before JSON: richer), then older dumps as fallbacks.
        files.sort(key=lambda f: (newest - f.mtime_ns > _SAME_DUMP_WINDOW_NS, f.fmt_hint == "json",
                                  -f.mtime_ns, f.path))
        if len(files) > 1:
            several.append(rank)
    if several:
        example = by_rank[several[0]]
        found.notes.append(
            f"{len(several)} ranks have several files (JSON twins or older dumps); each uses its newest dump "
            f"by the events in it, pickle before JSON, e.g. rank {several[0]}: {example[0].path} or {example[1].path}")
    found.by_rank = dict(sorted(by_rank.items()))
