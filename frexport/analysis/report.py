"""The report: a job's diagnosis, with where its ranks are now, for people (text) or programs (JSON).

One report for `frexport analyze`, the sidecar's evidence bundles and the job view's: they all call
`diagnose` on what they hold (traces, and the stacks beside them) and render it here. Pure: the
callers read files and stacks (decode/), this module only analyses and writes text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from frexport.analysis.engine import Options, analyze, format_ranks
from frexport.analysis.findings import HEALTHY, Diagnosis, Finding
from frexport.analysis.last_words import last_errors, with_last_words
from frexport.analysis.whereabouts import places, with_whereabouts
from frexport.model.call_site import Frame, Threads
from frexport.model.dump import InputError
from frexport.model.rank_trace import RankTrace

Calls = dict[int, tuple[str, dict[str, str]]]  # rank -> the torch.distributed call py-spy saw, its arguments


def diagnose(traces: Sequence[RankTrace], errors: Sequence[InputError], notes: Sequence[str],
             stacks: dict[int, Threads], calls: Calls, options: Options,
             callee: Callable[[Frame], str | None] = lambda f: None,
             logs: dict[int, str] | None = None) -> tuple[Diagnosis, dict[int, str]]:
    """The diagnosis of the traces, with where each rank is now where its stack is known (a bundle,
    `frexport snapshot --stacks`), and that place per rank: the same for `analyze` and bundles. `logs`:
    the last lines ranks printed (a bundle's logs/), whose last error line each root cause quotes for
    its culprits."""
    diagnosis = analyze(list(traces), list(errors), options=options, stacks=stacks, calls=calls)
    diagnosis.notes[:0] = notes
    where = places(stacks, callee)
    diagnosis.findings = with_last_words(with_whereabouts(diagnosis.findings, where), last_errors(logs or {}))
    return diagnosis, where


def report_json(d: Diagnosis, where: dict[int, str]) -> dict:
    """The JSON report: the diagnosis, and where each rank is now when its stack was read."""
    doc = d.to_json()
    if where:
        doc["ranks_now"] = {str(r): p for r, p in sorted(where.items())}  # from the saved stacks
    return doc


def render_json(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2)


def render_text(d: Diagnosis, skipped: Sequence[tuple[str, str]] = (), verbose: bool = False) -> str:
    lines = [verdict_line(d)]
    for i, f in enumerate(d.findings, 1):
        lines.append("")
        lines.extend(_finding(i, f))
    if d.progress:
        lines.append("")
        gap = f"{d.looks_gap_s:.1f} s apart" if d.looks_gap_s is not None else "time apart not recorded"
        lines.append(f"between two looks ({gap}):")
        lines.extend(f"  {g.text()}" for g in d.progress)
    if d.input_errors:
        lines.append("")
        lines.append(f"unreadable input ({len(d.input_errors)} files):")
        lines.extend(f"  {e.file}: {e.error}" for e in d.input_errors)
    notes = list(d.notes)
    if skipped:
        if verbose:
            notes.extend(f"skipped {path}: {why}" for path, why in skipped)
        else:
            notes.append(f"skipped {len(skipped)} files that are not dumps (e.g. {skipped[0][0]}: {skipped[0][1]}); "
                         f"--verbose lists them")
    if notes:
        lines.append("")
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in (notes if verbose else notes[:20]))
        if not verbose and len(notes) > 20:
            lines.append(f"  - ... {len(notes) - 20} more (--verbose)")
    return "\n".join(lines) + "\n"


def verdict_line(d: Diagnosis) -> str:
    scope = f"{len(d.ranks)} ranks" + (f" ({format_ranks(d.ranks)})" if d.ranks else "")
    if d.verdict == HEALTHY:
        return f"healthy: {scope}, {d.matched} collectives matched across {_plural(d.groups, 'process group')}"
    if not d.ranks:
        return f"{d.verdict}: no readable dump"
    if not d.findings:  # a filter hid every finding: say so, never look healthy
        first = d.hidden[0].message
        return (f"{d.verdict} outside the filter: {_plural(len(d.hidden), 'finding')} in {scope}, none shown; "
                f"first: {first}")
    head = f"{d.verdict}: {_plural(len(d.findings), 'finding')} in {scope}, {d.matched} collectives matched"
    head += f"; first: {d.findings[0].message}"
    if d.hidden:
        head += f" ({len(d.hidden)} more outside the filter)"
    return head


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _finding(i: int, f: Finding) -> list[str]:
    where = f"group {f.pg_name} ({f.pg_desc})" if f.pg_name or f.pg_desc else "job"
    head = f"{i}. {f.kind}" + (" [root cause]" if f.root_cause else "") + (" [suspect]" if not f.certain else "") \
        + f" - {where}"
    if f.collective_seq_id is not None:
        head += f", collective {f.collective_seq_id}"
    if f.op:
        head += f", {f.op}"
    out = [head, f"   {f.message}"]
    if f.reason:
        out.append(f"   why: {f.reason}")
    roles = []
    if f.culprit_ranks:
        roles.append(f"culprit: {format_ranks(f.culprit_ranks)}")
    if f.blocked_ranks:
        roles.append(f"blocked: {format_ranks(f.blocked_ranks)}")
    if roles:
        out.append("   " + "   ".join(roles))
    if f.call_site:
        out.append(f"   call site: {f.call_site}")
    out.extend(f"   {d}" for d in f.details)
    out.extend(f"   last error line of rank {r}{f' (printed {at})' if at else ''}: {line}"
               for r, line, at in f.last_words)
    return out
