"""One call-site text: the report, the timeline, the raw view and a frame all write `file:line function`."""

from frexport.analysis.engine import Options, analyze
from frexport.analysis.report import render_text
from frexport.export.timeline import build_timeline
from frexport.model.call_site import Frame, is_library_frame, site_text
from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, traces


def test_torch_and_native_frames_are_library_frames():
    assert is_library_frame(Frame("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", 1))
    assert is_library_frame(Frame("all_reduce", "C:\\py\\Lib\\site-packages\\torch\\distributed\\c10d.py", 1))
    assert is_library_frame(Frame("c10d::ProcessGroupGloo::allreduce", "", 0))  # C++: no .py file
    assert not is_library_frame(Frame("step", "/job/train.py", 10))
    assert not is_library_frame(Frame("step", "/job/torchtune_recipes/train.py", 10))


def test_the_user_frame_is_the_call_site_in_report_and_timeline():
    job = healthy_job(world=2)
    job[0].append(entry(10, 11, state="started", line=42, user_file="/job/model.py"))
    issued = T0 + 10 * STEP_NS
    by_rank = traces({r: dump(es, world=2) for r, es in job.items()}, seen_at_ns=issued + 60 * 10**9)
    diagnosis = analyze(list(by_rank.values()), options=Options(stall_after_s=5))
    text = site_text(Frame("step", "/job/model.py", 42))
    assert text == "/job/model.py:42 step" == str(Frame("step", "/job/model.py", 42))
    assert [f.call_site for f in diagnosis.findings] == [text]
    assert f"call site: {text}" in render_text(diagnosis)
    events = build_timeline(list(by_rank.values()), diagnosis)["traceEvents"]
    assert text in {e["args"].get("call_site") for e in events if e.get("ph") == "X"}
    assert site_text(None) is None
