"""What a bundle's profiles and native stacks add to its report: the lines under "below Python".

Read from the bundle's own files, like the rest of its report: `profiles/profiles.json` says which
rank is compared with which (evidence/profiles.py), their traces are read by decode/profile_trace.py
and compared by analysis/profile_compare.py; each `stacks/rank_<r>.native.txt` is read by
decode/native_stacks.py and analysis/native_wait.py names the torch frame its main thread waits in.
"""

from __future__ import annotations

import json
import os
import re

from frexport.analysis.native_wait import native_wait
from frexport.analysis.profile_compare import RankProfile, compare, summarize
from frexport.decode.native_stacks import MAX_CHARS, parse
from frexport.decode.profile_trace import MAX_GZIP_BYTES, MAX_JSON_BYTES, TraceError, read_trace

_NATIVE = re.compile(r"^rank_(\d+)\.native\.txt$")


def host_report(directory: str) -> tuple[list[str], dict]:
    """(report lines, JSON) of the bundle's profiles and native stacks; nothing where it has neither."""
    lines: list[str] = []
    doc: dict = {}
    prof_lines, prof_doc = _profiles(directory)
    nat_lines, nat_doc = _native(directory)
    lines = prof_lines + nat_lines
    if prof_doc:
        doc["profiles"] = prof_doc
    if nat_doc:
        doc["native_stacks"] = nat_doc
    return lines, doc


def _profiles(directory: str) -> tuple[list[str], dict]:
    meta = _read(os.path.join(directory, "profiles", "profiles.json"), 1 << 20)
    if meta is None:
        return [], {}
    try:
        m = json.loads(meta)
        slow, peer, ranks = m["slow_rank"], m.get("peer_rank"), m["ranks"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return ["profiles: profiles/profiles.json is unreadable"], {}
    lines, doc = [], {"ranks": ranks}
    summaries: dict[int, RankProfile] = {}
    for key, info in sorted(ranks.items()) if isinstance(ranks, dict) else ():
        if not isinstance(info, dict) or not str(key).isdecimal():
            continue
        rank, rel = int(key), info.get("file")
        if not isinstance(rel, str):
            lines.append(f"profiles: rank {rank}: no profile ({info.get('error')})")
            continue
        data = _read(os.path.join(directory, rel), max(MAX_GZIP_BYTES, MAX_JSON_BYTES))
        try:
            trace = read_trace(data or b"")
        except TraceError as exc:
            lines.append(f"profiles: rank {rank}: {rel} is not a readable trace: {exc}")
            continue
        summaries[rank] = summarize(rank, trace)
        if summaries[rank].tid is None or not trace.events:
            lines.append(f"profiles: rank {rank}: its trace ({info.get('handler')}) holds no host event of its "
                         "training thread (PyTorch's torch_profile, started off the main thread, records none)")
    if slow in summaries and peer in summaries:
        c = compare(summaries[slow], summaries[peer])
        lines.insert(0, "profiles: " + c.text())
        doc["comparison"] = c.to_json()
    return lines, doc


def _native(directory: str) -> tuple[list[str], dict]:
    try:
        names = sorted(n for n in os.listdir(os.path.join(directory, "stacks")) if _NATIVE.match(n))
    except OSError:
        return [], {}
    lines, doc = [], {}
    for n in sorted(names, key=lambda n: int(_NATIVE.match(n).group(1))):  # type: ignore[union-attr]
        rank = int(_NATIVE.match(n).group(1))  # type: ignore[union-attr]
        raw = _read(os.path.join(directory, "stacks", n), MAX_CHARS)
        stacks = parse((raw or b"").decode(errors="replace"))
        if not stacks.threads:
            said = [ln[2:] for ln in (raw or b"").decode(errors="replace").splitlines()[:5] if ln.startswith("# ")]
            why = said[-1] if said else "empty"
            lines.append(f"native stack: rank {rank}: none ({why[:200]})")
            doc[str(rank)] = {"tool": stacks.tool, "frame": None}
            continue
        wait = native_wait(stacks)
        if wait is None:
            lines.append(f"native stack: rank {rank} ({stacks.tool}): its main thread does not wait in torch")
        else:
            lines.append(f"native stack: rank {rank} waits in {wait.text()} ({stacks.tool}, stacks/{n})")
        doc[str(rank)] = {"tool": stacks.tool, "frame": wait.frame if wait else None,
                          "library": wait.library if wait else None, "primitive": wait.primitive if wait else None}
    return lines, doc


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except OSError:
        return None
