"""A bundle's report: `frexport analyze` on the bundle's own files, made by the analysis.

Run on the evidence stage's thread between the writer's `begin` (the data is on disk, hidden) and
`finish`: the files' times are when the ranks answered (a clock), their pickles carry the call
sites, their stacks say where each rank is now, and the threshold is the live one that saw the stall.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from frexport import logs
from frexport.analysis import report
from frexport.analysis.engine import Options
from frexport.decode.load import load
from frexport.decode.sandbox import Limits
from frexport.decode.stacks import callee
from frexport.evidence.bundle import Bundle
from frexport.evidence.host_report import host_report

# (bundle directory, the live stall threshold) -> its report (text, JSON)
Reporter = Callable[[str, float], tuple[str, dict]]


def bundle_report(directory: str, stall_after_s: float, limits: Limits | None = None) -> tuple[str, dict]:
    """The report of the bundle in `directory`, as `frexport analyze DIR` makes it."""
    loaded = load([directory], workers=1, limits=limits)
    found = loaded.stacks_beside([directory])
    diagnosis, where = report.diagnose(loaded.traces, loaded.errors, loaded.discovery.notes + loaded.notes,
                                       found.threads, found.calls, Options(stall_after_s=stall_after_s, clock=True),
                                       callee, loaded.logs_beside([directory]))
    return report.render_text(diagnosis, loaded.discovery.skipped), report.report_json(diagnosis, where)


def report_of(reporter: Reporter | None, directory: str, bundle: Bundle) -> tuple[str, dict]:
    """The reporter's report of the bundle's files, its paths relative to the bundle (the temp
    directory's name means nothing once renamed); the live diagnosis if there is none or it fails."""
    text, doc = bundle.report_text, bundle.report_json
    if reporter is not None:
        try:
            text, doc = reporter(directory, bundle.stall_after_s)
            inside = directory.rstrip("/") + "/"
            text, doc = text.replace(inside, ""), json.loads(json.dumps(doc).replace(json.dumps(inside)[1:-1], ""))
        except Exception:  # noqa: BLE001 - the bundle still matters without its own analysis
            logs.get().exception("analysing the evidence bundle failed: its report is the live diagnosis")
            text, doc = bundle.report_text, bundle.report_json
    return _below_python(directory, text, doc)


def _below_python(directory: str, text: str, doc: dict) -> tuple[str, dict]:
    """The report with what its profiles and native stacks say (evidence/host_report.py) added."""
    try:
        lines, extra = host_report(directory)
    except Exception:  # noqa: BLE001 - never lose the report for its additions
        logs.get().exception("reading the bundle's profiles and native stacks failed")
        return text, doc
    if not lines:
        return text, doc
    return text.rstrip("\n") + "\n\nbelow Python:\n" + "".join(f"  {line}\n" for line in lines), {**doc, **extra}
