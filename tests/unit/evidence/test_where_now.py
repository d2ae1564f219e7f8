"""One rule for where a rank is now: the pod's bundle (its report, made by `frexport analyze` on the
bundle's files) and the job view's bundle (its summary) read the same real stack text, by the same
parser, to the same answer. The stacks and recorders are those a real stuck gloo job saved."""

import json
import time
from types import SimpleNamespace

from frexport.analysis.whereabouts import now_frame, place
from frexport.config import Analysis
from frexport.decode.read import decode_bytes
from frexport.decode.stacks import parse_pyspy, parse_traceback
from frexport.evidence.job import JobEvidenceSink
from frexport.evidence.report import bundle_report
from frexport.evidence.sink import EvidenceSink
from frexport.evidence.where import hang_line, now_line
from frexport.export.evidence import EvidenceWriter
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.sink import Pass
from frexport.model.call_site import frame_text
from frexport.sources.handlers import PICKLE_HANDLER, TRACEBACK_HANDLER
from tests.support.paths import REAL_FIXTURES

STUCK = REAL_FIXTURES / "stuck_before_collective"


class _Ranks:
    """A source's handlers as the evidence stage asks them (sources/handlers.py), answered with what
    the real job saved: its pickles (with frames) and its faulthandler stacks."""

    collisions: dict = {}
    cut = (0, 0)  # no rank left out

    def targets(self):
        return [SimpleNamespace(rank=r) for r in range(4)]

    def handlers(self, rank):
        return frozenset({TRACEBACK_HANDLER, PICKLE_HANDLER})

    def fetch_all(self, wanted, deadline_s):
        out = {}
        for t, h in wanted:
            if h.startswith(PICKLE_HANDLER):
                out[(t.rank, h)] = (STUCK / f"trace_{t.rank}").read_bytes()
            elif h == TRACEBACK_HANDLER:
                out[(t.rank, h)] = (STUCK / "stacks" / f"rank_{t.rank}.txt").read_bytes()
        return out

    def decode_pickles(self, raw):
        return {r: decode_bytes(b, f"rank {r}", rank=r) for r, b in raw.items()}


def _incident(scoped):
    polled = {}
    for r in range(4):
        body = (STUCK / "json" / f"trace_{r}.json").read_bytes()
        newest = max(e.time_created_ns for e in decode_bytes(body, "x", rank=r).entries)
        polled[r] = decode_bytes(body, f"rank-{r}", rank=r, dumped_at_ns=newest + 120 * 10**9)
    result = LiveAnalysis(Analysis(stall_after=5.0), scoped=scoped).run(polled)
    assert {r for f in result.new_root_causes for r in f.culprit_ranks} == {2}
    return Pass(time.time_ns(), [], result, result, polled)


def test_the_pod_bundle_and_the_job_bundle_say_the_same_place_of_the_same_stack(tmp_path):
    pod = EvidenceSink(EvidenceWriter(str(tmp_path / "pod")), _Ranks(), pyspy=False, reporter=bundle_report)
    pod_doc = json.loads((tmp_path / "pod" / pod.write_incident(_incident(True)) / "report.json").read_text())
    job = JobEvidenceSink(EvidenceWriter(str(tmp_path / "job")), _Ranks(), window=2000, pyspy=False)
    job_doc = json.loads((tmp_path / "job" / job.write_incident(_incident(False)) / "report.json").read_text())

    frame = now_frame(parse_traceback((STUCK / "stacks" / "rank_2.txt").read_text()))
    assert frame is not None and frame_text(frame).endswith("stuck_before_collective.py:12 load_batch")
    # (the pod's place also names what the line calls, where the source file is readable here)
    now = pod_doc["ranks_now"]["2"]
    assert now.startswith(f"{frame_text(frame)}") and now.endswith(", outside any collective"), now
    assert job_doc["culprit_stack_lines"]["2"] == frame_text(frame)
    assert any(w.endswith(f"now at {frame_text(frame)}") for w in job_doc["where"]), job_doc["where"]


def test_every_captured_stack_reads_the_same_in_both_bundles():
    """Over every stack the real jobs saved: the job bundle's line is the pod bundle's place."""
    texts = sorted(REAL_FIXTURES.glob("**/stacks/rank_*.txt"))
    assert len(texts) > 20
    for path in texts:
        if path.name.endswith(".pyspy_dump.txt"):
            continue
        text = path.read_text(errors="replace")
        where, line = place(parse_traceback(text)), hang_line(text)
        assert (where is None) == (line is None), path
        assert where is None or where.startswith(f"{line}, "), (path, where, line)


def test_a_rank_with_only_py_spys_stack_reads_the_same_in_both_bundles():
    """The pod bundle reads py-spy's dump where a rank has no traceback (decode/stacks.py); so does
    the job bundle's summary."""
    texts = sorted(REAL_FIXTURES.glob("**/stacks/rank_*.pyspy_dump.txt"))
    assert texts
    for path in texts:
        text = path.read_text(errors="replace")
        where, line = place(parse_pyspy(text)[0]), now_line({"pyspy_dump": text})
        assert line is not None and where is not None and where.startswith(f"{line}, "), (path, where, line)
