"""The job bundle's summary: where the ranks are, grouped, and the line a culprit hangs on."""

import time

from frexport.decode.normalize import normalize
from frexport.decode.read import decode_bytes
from frexport.evidence.where import hang_line, where_ranks
from frexport.sources.handlers import PICKLE_HANDLER
from tests.support import paths
from tests.support.synth import dump, entry

TRACEBACK = '''Thread 0x00007f00000002 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
  File "/venv/lib/python3.12/site-packages/frexport/agent/__init__.py", line 230 in _snapshots
  File "/usr/lib/python3.12/threading.py", line 1012 in run

Current thread 0x00007f00000001 (most recent call first):
  File "/job/data.py", line 210 in next_batch
  File "/job/train.py", line 41 in load_batch
  File "/job/train.py", line 47 in train_step
  File "/job/train.py", line 52 in <module>
'''


def test_hang_line_is_the_scripts_innermost_user_frame():
    assert hang_line(TRACEBACK) == "/job/data.py:210 next_batch"
    assert hang_line('  File "/venv/lib/python3.12/site-packages/torch/x.py", line 3, in f\n') is None
    assert hang_line("") is None


def _d(rank, entries, frames=True):
    return normalize(dump(entries, world=4), f"rank {rank}", "pickle", rank=rank, keep_frames=frames)


def test_ranks_grouped_by_where_they_are():
    done = [entry(i, i + 1) for i in range(5)]
    waiting = done + [entry(5, 6, state="scheduled", duration_ms=None, line=88)]
    dumps = {r: _d(r, waiting, frames=False) for r in range(3)} | {3: _d(3, done, frames=False)}
    framed = {0: _d(0, waiting)}
    lines = where_ranks(dumps, framed, {3: {"traceback": TRACEBACK}}, {3})
    assert lines[0].startswith("3 ranks (0-2) wait in all_reduce (collective 6 of group nccl:0 (default_pg)) at "
                               "/job/train.py:88"), lines
    assert lines[1] == ("rank 3: after all_reduce (collective 5 of group nccl:0 (default_pg)), now at "
                        "/job/data.py:210 next_batch"), lines


class _Pods:
    """The peers source as the sink sees it, over the captured pickles of a real hang (a fake: the
    real one needs pods' sidecars, tests/e2e/test_jobview.py runs it)."""

    collisions: dict = {}  # no rank two peers claim
    cut = (0, 0)  # no rank left out

    def __init__(self, ranks):
        self.ranks = ranks

    def targets(self):
        from types import SimpleNamespace
        return [SimpleNamespace(rank=r) for r in self.ranks]

    def handlers(self, rank):
        return frozenset({"dump_traceback", PICKLE_HANDLER})

    def fetch_all(self, wanted, deadline_s):
        return {(t.rank, h): (paths.REAL_FIXTURES / "stuck_before_collective" / f"trace_{t.rank}").read_bytes()
                for t, h in wanted if h == PICKLE_HANDLER}

    def decode_pickles(self, raw):
        from frexport.decode.read import decode_bytes
        return {r: decode_bytes(b, f"rank {r}", rank=r) for r, b in raw.items()}


def test_a_culprit_the_pass_had_no_snapshot_of_is_diagnosed_from_what_its_pod_sends(tmp_path):
    """The view names rank 2 'left no dump' (its pod had not sent it yet); the bundle fetches rank 2's
    recorder from its pod and says what it is: rank 2 never issued the collective."""
    import json

    from frexport.config import Analysis
    from frexport.evidence.job import JobEvidenceSink
    from frexport.export.evidence import EvidenceWriter
    from frexport.live.diagnosis import LiveAnalysis
    from frexport.live.sink import Pass

    polled = {}
    for r in range(4):
        body = (paths.REAL_FIXTURES / "stuck_before_collective" / "json" / f"trace_{r}.json").read_bytes()
        newest = max(e.time_created_ns for e in decode_bytes(body, "x", rank=r).entries)
        polled[r] = decode_bytes(body, f"rank-{r}", rank=r, dumped_at_ns=newest + 120 * 10**9)
    seen = {r: d for r, d in polled.items() if r != 2}
    result = LiveAnalysis(Analysis(stall_after=5.0), scoped=False).run(seen)
    assert [f.kind for f in result.new_root_causes] == ["missing_dump"]
    sink = JobEvidenceSink(EvidenceWriter(str(tmp_path)), _Pods(range(4)), window=2000, pyspy=False)
    bundle = sink.write_incident(Pass(time.time_ns(), [], result, result, seen))
    assert bundle.endswith("-missing_rank"), bundle
    report = json.loads((tmp_path / bundle / "report.json").read_text())
    assert [(f["kind"], f["culprit_ranks"]) for f in report["findings"] ] == [("missing_rank", [2])]


def test_one_rank_whose_trace_cannot_be_built_costs_only_that_rank(tmp_path, caplog):
    """Issue 28 (low): one junk column made the re-analysis fail, and every call site left the bundle.
    Rank 0's snapshot carries a value no decode path gives any more (a duration of 1e300 ms overflows
    the trace's int64 column): a fake, as the field rules now refuse it before it gets here."""
    import dataclasses
    import json

    from frexport.config import Analysis
    from frexport.evidence.job import JobEvidenceSink
    from frexport.export.evidence import EvidenceWriter
    from frexport.live.diagnosis import LiveAnalysis
    from frexport.live.sink import Pass

    polled = {}
    for r in range(4):
        body = (paths.REAL_FIXTURES / "stuck_before_collective" / "json" / f"trace_{r}.json").read_bytes()
        newest = max(e.time_created_ns for e in decode_bytes(body, "x", rank=r).entries)
        polled[r] = decode_bytes(body, f"rank-{r}", rank=r, dumped_at_ns=newest + 120 * 10**9)
    result = LiveAnalysis(Analysis(stall_after=5.0), scoped=False).run(polled)
    bad = polled[0]
    polled[0] = dataclasses.replace(bad, entries=(bad.entries[0]._replace(duration_ms=1e300),) + bad.entries[1:])
    sink = JobEvidenceSink(EvidenceWriter(str(tmp_path)), _Pods([1, 2, 3]), window=2000, pyspy=False)
    bundle = sink.write_incident(Pass(time.time_ns(), [], result, result, polled))
    report = json.loads((tmp_path / bundle / "report.json").read_text())
    assert any(f.get("call_site") for f in report["findings"]), report["findings"]  # the others' call sites
    assert "rank 0's trace could not be built" in caplog.text


def test_a_bundle_fetches_the_recorders_of_at_most_8_culprits(tmp_path, caplog):
    """Issue 28 (medium): a bundle fetch held every focus rank's bodies in memory at once."""
    from frexport.config import Analysis
    from frexport.evidence.job import JobEvidenceSink
    from frexport.export.evidence import EvidenceWriter
    from frexport.live.diagnosis import LiveAnalysis
    from frexport.live.sink import Pass

    world, asked = 41, []
    now = time.time_ns()
    ranks = {}
    for r in range(world):  # ranks 20-40 wait in collective 6; ranks 0-19 never issued it
        es = [entry(i, i + 1, created=now - 200 * 10**9 + i) for i in range(5)]
        if r >= 20:
            es.append(entry(5, 6, state="scheduled", duration_ms=None, created=now - 120 * 10**9))
        ranks[r] = normalize(dump(es, world=world), f"rank {r}", "pickle", rank=r, dumped_at_ns=now,
                             keep_frames=False)
    result = LiveAnalysis(Analysis(stall_after=5.0), scoped=False).run(ranks)
    assert len({r for f in result.new_root_causes for r in f.culprit_ranks}) == 20

    class Recording(_Pods):
        def fetch_all(self, wanted, deadline_s):
            asked.extend((t.rank, h) for t, h in wanted)
            return {}

    sink = JobEvidenceSink(EvidenceWriter(str(tmp_path)), Recording(range(world)), window=2000, pyspy=False)
    assert sink.write_incident(Pass(time.time_ns(), [], result, result, ranks))
    assert len({r for r, h in asked if h == PICKLE_HANDLER}) == 8 + 4  # 8 culprits, 4 blocked ranks
    assert "20 culprit ranks; the recorders and stacks of the first 8 are fetched" in caplog.text
