"""A rank's last error line, from the last lines it printed (its log tail, handed in as text), and the
root causes that quote it for their culprits: a rank that left the job says why in its last words
(`RuntimeError: loss is NaN at step 5`, `torch.OutOfMemoryError: CUDA out of memory. ...`).

The one rule: reading back from the end (past the ring's prefix and a launcher's `[rank3]:`), the
last line that is an exception's final line as Python
prints it (`Name: message` or a bare `NameError`, the name ending in Error, Exception, Interrupt, Exit
or Failure, at the start of the line: traceback frames are indented), or C++'s `terminate called ...`,
its `what():`, or `Fatal Python error`. Warnings are not errors. Pure: the text comes from the callers
(decode/rank_logs.py reads it), as stacks do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from frexport.analysis.findings import Finding

MAX_QUOTE = 400  # characters of a quoted line
# the agent's ring prefix: `[host:rank] 2026-05-01T12:03:07.412Z err| `
_PREFIX = re.compile(r"^\[[^\]\n]{0,300}:\d{1,7}\] (?P<at>\d{4}-\d\d-\d\dT[\d:.]{8,12}Z) (?:out|err)\| ")
# what launchers and torch put before a rank's lines: torch's `[rank3]: ` before an uncaught exception's
# traceback, torchrun --tee's `[default0]:`
_LAUNCHER = re.compile(r"^(?:\[[\w.:-]{1,64}\]:\s?){1,3}")
_ERROR = re.compile(
    r"^(?:(?:[A-Za-z_]\w{0,100}\.){0,8}[A-Za-z_]\w{0,100}(?:Error|Exception|Interrupt|Exit|Failure)(?::\s.*)?"
    r"|terminate called .*|\s*what\(\):\s.*|Fatal Python error: .*)$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class LastWords:
    line: str  # the error line, without the ring's prefix, control characters shown as '?'
    at: str | None  # when the tee read it (UTC, from the ring's prefix), where known


def last_error(text: str) -> LastWords | None:
    """The last error line of a rank's log tail, or None where it printed none."""
    for raw in reversed(text.split("\n")):
        m = _PREFIX.match(raw)
        body = raw[m.end():] if m else raw
        body = _LAUNCHER.sub("", body).rstrip("\r")
        if _ERROR.match(body):
            quoted = _CONTROL.sub("?", body.strip())
            if len(quoted) > MAX_QUOTE:
                quoted = quoted[:MAX_QUOTE] + " ..."
            return LastWords(quoted, m["at"] if m else None)
    return None


def last_errors(tails: dict[int, str]) -> dict[int, LastWords]:
    return {r: w for r, text in tails.items() if (w := last_error(text)) is not None}


def with_last_words(findings: list[Finding], words: dict[int, LastWords]) -> list[Finding]:
    """Each root cause with the last error line of each of its culprits that printed one."""
    if not words:
        return findings
    out = []
    for f in findings:
        said = tuple((r, words[r]) for r in f.culprit_ranks if r in words)
        if f.root_cause and said:
            f = replace(f, last_words=tuple((r, w.line, w.at) for r, w in said))
        out.append(f)
    return out
