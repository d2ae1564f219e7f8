"""Span mapping: what a user sees in Jaeger for an entry, a finding and a stall."""

import pickle

from opentelemetry.trace import StatusCode

from frexport.decode.read import decode_bytes
from frexport.export.otlp import spans as S
from frexport.live.state import LiveState
from frexport.model.outcome import Outcome
from tests.support import paths
from tests.support.fr_events import result_of, snapshot
from tests.support.synth import T0

NS = "pytorch.distributed."


def _events(**kw):
    state = LiveState()
    return [ev for r in (0, 1) for ev in state.ingest(snapshot(r, 0, 3, T0, **kw), "s", T0)]


def _span(ev, finding=None, job="job-7", world_size=None):
    return S.entry_span(ev, job, S.Resources(job, world_size).of(ev.rank), finding)


def test_an_entry_is_a_span_from_enqueue_to_completion_with_its_call_site():
    ev = _events()[0]
    s = _span(ev)
    e = ev.entry
    assert s.name == "all_reduce" and s.parent is None
    assert s.start_time == e.time_created_ns and s.end_time == e.time_started_ns + 1_000_000  # duration_ms=1
    a = s.attributes
    assert a[NS + "end_time_source"] == "duration" and a[NS + "outcome"] == "completed"
    assert a[NS + "rank"] == 0 and a[NS + "pg.desc"] == "default_pg" and a[NS + "record_id"] == 0
    assert a[NS + "input_sizes"] == "[[4, 4]]" and a[NS + "input_dtypes"] == ["Float"]
    assert (a["code.filepath"], a["code.lineno"], a["code.function"]) == ("/job/train.py", 10, "step")
    assert s.status.status_code == StatusCode.UNSET


def test_end_time_without_nccl_timing_is_the_discovered_or_observed_one():
    ev = _events(duration_ms=None)[0]
    s = _span(ev)
    assert s.attributes[NS + "end_time_source"] == "discovered" and s.end_time == ev.entry.time_completed_ns
    gloo = _events(backend="gloo", state="scheduled", retired=True)[0]  # gloo records no end
    s = _span(gloo._replace(observed_ns=T0 + 5 * 10**9))
    assert s.attributes[NS + "end_time_source"] == "observed" and s.end_time == T0 + 5 * 10**9
    assert s.attributes[NS + "outcome"] == "retired"


def test_a_hooked_backends_spans_end_when_the_backend_reported_or_say_the_end_is_unknown():
    """torch 2.15's hook stamps start and completion with the moment the backend reported completion:
    that moment is the end (not that moment plus the duration). An op retired at issue (no completion
    pushed) has no known end: a zero-length span that says so, never the time the sidecar saw it."""
    from tests.support.synth import dump, hook_entry

    def one(e):
        d = decode_bytes(pickle.dumps(dump([e], world=1)), "x", rank=0)
        return LiveState().ingest(d, "s", T0 + 10**10)[0]

    pushed = one(hook_entry(0, 1, push=True, duration_ms=3.0))
    s = _span(pushed)
    assert (s.end_time, s.attributes[NS + "end_time_source"]) == (pushed.entry.time_completed_ns, "discovered")
    issued = one(hook_entry(0, 1, push=False, backend="ucc"))
    s = _span(issued)
    assert (s.end_time, s.attributes[NS + "end_time_source"], s.attributes[NS + "outcome"]) == \
        (issued.entry.time_created_ns, "unknown", "issued")


def test_timed_out_entry_and_an_entry_a_finding_names_are_errors():
    ev = _events()[0]
    timed_out = _span(ev._replace(outcome=Outcome.TIMED_OUT))
    assert timed_out.status.status_code == StatusCode.ERROR and timed_out.status.description == "timed out"
    dumps = {0: snapshot(0, 0, 3, T0), 1: snapshot(1, 0, 3, T0, sizes=((8, 8),))}
    f = next(f for f in result_of(dumps).diagnosis.findings if f.kind == "size_mismatch")
    s = _span(ev if ev.rank in f.culprit_ranks else _events()[3], f)
    assert s.status.status_code == StatusCode.ERROR and s.status.description == "size_mismatch"
    assert s.events[0].name == "size_mismatch" and s.events[0].attributes["message"] == f.message


def test_one_trace_per_collective_across_ranks_and_one_span_id_per_entry_and_epoch():
    evs = _events()
    by_seq = {}
    for ev in evs:
        by_seq.setdefault(ev.entry.collective_seq_id, set()).add(_span(ev).context.trace_id)
    assert all(len(ids) == 1 for ids in by_seq.values()) and len({min(i) for i in by_seq.values()}) == 3
    assert len({_span(ev).context.span_id for ev in evs}) == len(evs)
    again = evs[0]._replace(epoch=1)  # the trainer restarted: same record id, a new entry
    assert _span(again).context.span_id != _span(evs[0]).context.span_id
    assert S.trace_id_for("j", "0", 3) != S.trace_id_for("j", "0", 3, p2p=True) != S.trace_id_for("k", "0", 3)


def test_resource_names_the_rank_process(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("POD_NAME", "train-0")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    r = S.Resources("job-7").of(3).attributes
    assert r["service.name"] == "job-7" and r[NS + "rank"] == 3 and r[NS + "job_id"] == "job-7"
    assert r["k8s.pod.name"] == "train-0" and r["deployment.environment"] == "test"
    assert S.Resources("").of(0).attributes["service.name"] == "pytorch-training"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    assert S.Resources("job-7").of(0).attributes["service.name"] == "trainer"


def test_world_size_from_the_snapshot_else_the_setting():
    ev = _events()[0]  # pg_config of the default group: 2 ranks
    res = S.Resources("j", world_size=8)
    assert res.of(0).attributes[NS + "world_size"] == 8  # nothing seen yet: the setting
    res.saw(ev)
    assert res.of(0).attributes[NS + "world_size"] == 2  # the rank's own snapshot wins
    gloo = _events(world=None)[0]
    assert gloo.world_size is None
    assert NS + "world_size" not in S.Resources("j").of(0).attributes


def test_a_stall_is_a_stalled_span_for_the_waiting_rank_and_missing_for_the_culprit():
    now = T0 + 10**12
    dumps = {0: snapshot(0, 0, 5, now, stuck_at=6), 1: snapshot(1, 0, 5, now)}
    f = result_of(dumps).diagnosis.findings[0]
    assert f.kind == "missing_rank" and f.culprit_ranks == (1,) and S.stalled_ranks(f) == [0, 1]
    spans = {r: S.stall_span(f, r, "j", S.Resources("j").of(r), now) for r in S.stalled_ranks(f)}
    assert spans[0].name == "stalled all_reduce" and spans[1].name == "missing all_reduce"
    assert spans[0].context.trace_id == spans[1].context.trace_id == S.trace_id_for("j", "nccl:0", 6)
    assert all(s.status.status_code == StatusCode.ERROR and s.events[0].name == "stalled" for s in spans.values())
    assert spans[0].start_time == f.time_ns and spans[0].end_time == now


def test_world_size_of_real_gloo_dumps_comes_from_the_setting():
    # Real gloo dumps (torch 2.13 worker server) leave pg_config empty: no world size in the data.
    gloo = decode_bytes((paths.REAL_FIXTURES / "healthy" / "json" / "trace_0.json").read_bytes(), "w", rank=0)
    assert gloo.world_size is None
    for setting in (4, None):
        res = S.Resources("j", world_size=setting)
        evs = LiveState().ingest(gloo, "s", T0)
        for ev in evs:
            res.saw(ev)
        assert evs and res.of(0).attributes.get(NS + "world_size") == setting
