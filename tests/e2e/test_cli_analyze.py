"""`frexport analyze` as a user runs it: output shape, exit codes, filters, raw view, timeline."""

import json
import os
import subprocess
import sys

from tests.support.synth import STEP_NS, T0, dump, entry, healthy_job, write

FREXPORT = [sys.executable, "-m", "frexport"]


def _run(*args):
    return subprocess.run(FREXPORT + list(map(str, args)), capture_output=True, text=True, timeout=120)


def _stuck_dir(tmp_path):
    job = healthy_job()
    for r in (0, 1, 3):
        job[r].append(entry(10, 11, state="started", line=10))
    return write(tmp_path / "dumps", {r: dump(es, world=4) for r, es in job.items()})


def test_json_shape_and_exit_code_for_findings(tmp_path):
    out = _run("analyze", _stuck_dir(tmp_path), "--format", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"verdict", "ranks", "findings", "input_errors"}
    # files' times do not say how long ranks 0, 1, 3 waited: rank 2 is the suspect (docs/diagnosis.md)
    assert doc["verdict"] == "inconclusive" and doc["ranks"] == [0, 1, 2, 3]
    f = doc["findings"][0]
    assert set(f) == {"kind", "process_group", "collective_seq_id", "culprit_ranks", "blocked_ranks", "op",
                      "call_site", "message", "reason", "certain"}
    assert f["certain"] is False and "do not say how long" in f["reason"]
    assert f["process_group"] == {"name": "0", "desc": "default_pg"}
    assert (f["kind"], f["culprit_ranks"], f["blocked_ranks"]) == ("missing_rank", [2], [0, 1, 3])


def test_healthy_prints_a_verdict_and_exits_0(tmp_path):
    d = write(tmp_path / "ok", {r: dump(es, world=4) for r, es in healthy_job().items()})
    out = _run("analyze", d)
    assert out.returncode == 0
    assert out.stdout.splitlines()[0] == "healthy: 4 ranks (0-3), 10 collectives matched across 1 process groups"


def test_text_report_names_culprit_and_call_site(tmp_path):
    out = _run("analyze", _stuck_dir(tmp_path))
    assert out.returncode == 1
    assert "missing_rank [root cause]" in out.stdout and "culprit: 2" in out.stdout
    assert "call site: /job/train.py:10 step" in out.stdout


def test_no_readable_input_exits_2(tmp_path):
    (tmp_path / "trace_0").write_bytes(b"garbage")
    out = _run("analyze", tmp_path, "--format", "json")
    assert out.returncode == 2
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "inconclusive" and doc["input_errors"][0]["file"].endswith("trace_0")
    assert _run("analyze", tmp_path / "nope").returncode == 2
    assert _run("analyze", "--selected-ranks", "x-y", tmp_path).returncode == 2


def test_bad_files_are_reported_and_others_analysed(tmp_path):
    d = _stuck_dir(tmp_path)
    (d / "nccl_trace_rank_4").write_bytes(b"")
    (d / "nccl_trace_rank_5").write_bytes((d / "nccl_trace_rank_0").read_bytes()[:87])
    (d / "notes.txt").write_text("not a dump")
    doc = json.loads(_run("analyze", d, "--format", "json").stdout)
    errors = {e["file"].rsplit("/", 1)[1]: e["error"] for e in doc["input_errors"]}
    assert "empty file" in errors["nccl_trace_rank_4"] and "truncated" in errors["nccl_trace_rank_5"]
    assert doc["findings"][0]["culprit_ranks"] == [2]


def test_filters_and_raw_view(tmp_path):
    d = _stuck_dir(tmp_path)
    doc = json.loads(_run("analyze", d, "--format", "json", "--pg-filters", "tp").stdout)
    assert doc["findings"] == []
    doc = json.loads(_run("analyze", d, "--format", "json", "--selected-ranks", "3").stdout)
    assert doc["findings"][0]["blocked_ranks"] == [0, 1, 3]
    raw = _run("analyze", d, "--raw", "--selected-ranks", "0", "-v")
    assert raw.returncode == 0 and "rank 0:" in raw.stdout and "rank 1:" not in raw.stdout
    assert "nccl:all_reduce" in raw.stdout and "/job/train.py:10 step" in raw.stdout


def test_timeline_is_valid_trace_event_json(tmp_path):
    out_file = tmp_path / "tl.json"
    _run("analyze", _stuck_dir(tmp_path), "--timeline", out_file)
    doc = json.loads(out_file.read_text())
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "M", "i"), e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["ts"] >= 0 and isinstance(e["dur"], (int, float))
            assert e["dur"] >= 0
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index")
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"rank 0", "rank 1", "rank 2", "rank 3"}
    marker = [e for e in events if e["ph"] == "i"]
    assert marker and marker[0]["pid"] == 2 and marker[0]["name"].startswith("missing_rank")
    stuck = [e for e in events if e["ph"] == "X" and e["args"].get("state") == "not finished when dumped"]
    assert sorted(e["pid"] for e in stuck) == [0, 1, 3]


def _seen_10s_after(tmp_path):
    """The stuck job, every rank's dump written 10 s after the collective that ranks 0, 1, 3 wait in."""
    d = _stuck_dir(tmp_path)
    written = (T0 + 10 * STEP_NS + 10 * 10**9) // 1000 * 1000
    for f in d.iterdir():
        os.utime(f, ns=(written, written))
    return d


def test_stall_after_decides_when_an_absent_rank_is_missing(tmp_path):
    d = _seen_10s_after(tmp_path)
    late = _run("analyze", d, "--format", "json", "--stall-after", "5")
    assert late.returncode == 1 and late.stderr == ""
    assert [(f["kind"], f["culprit_ranks"]) for f in json.loads(late.stdout)["findings"]] == [("missing_rank", [2])]
    # seen only 10 s after its peers: it may still be on its way, not missing
    early = _run("analyze", d, "--format", "json", "--stall-after", "60")
    assert early.returncode == 0 and json.loads(early.stdout)["verdict"] == "healthy"


def test_stuck_after_is_a_deprecated_alias_of_stall_after(tmp_path):
    d = _seen_10s_after(tmp_path)
    old = _run("analyze", d, "--format", "json", "--stuck-after", "60")
    assert old.stderr == "frexport analyze: --stuck-after is deprecated, use --stall-after\n"
    assert old.stdout == _run("analyze", d, "--format", "json", "--stall-after", "60").stdout
    old = _run("analyze", d, "--format", "json", "--stuck-after", "5")
    assert json.loads(old.stdout)["findings"][0]["culprit_ranks"] == [2]
    helptext = _run("analyze", "--help").stdout
    assert "--stall-after" in helptext and "--stuck-after" not in helptext


def test_the_highest_ranks_unreadable_gloo_dump_is_not_healthy(tmp_path):
    """Issue 18 point 12, on a copy of real gloo dumps: the highest rank's file truncated."""
    from tests.support import paths

    real = paths.ROOT / "tests" / "fixtures" / "real" / "healthy"
    for r in range(4):
        (tmp_path / f"trace_{r}").write_bytes((real / f"trace_{r}").read_bytes()[: 100 if r == 3 else None])
    out = _run("analyze", tmp_path, "--format", "json")
    assert out.returncode == 1, out.stdout
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "inconclusive"
    assert [(f["kind"], f["culprit_ranks"]) for f in doc["findings"]] == [("missing_dump", [3])]


def test_a_non_utf8_file_name_does_not_crash_a_strict_utf8_stdout(tmp_path):
    from tests.support import paths

    real = paths.ROOT / "tests" / "fixtures" / "real" / "healthy"
    for r in range(4):
        (tmp_path / f"trace_{r}").write_bytes((real / f"trace_{r}").read_bytes())
    os.mkdir(os.path.join(os.fsencode(tmp_path), b"sub\xff"))
    with open(os.path.join(os.fsencode(tmp_path), b"sub\xff", b"trace_4"), "wb") as f:
        f.write(b"garbage")
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")
    for args in ([], ["-v"], ["--format", "json"], ["--raw"]):
        out = subprocess.run(FREXPORT + ["analyze", str(tmp_path), *args], capture_output=True, timeout=120, env=env)
        assert b"Traceback" not in out.stderr, (args, out.stderr.decode(errors="replace"))
        out.stdout.decode("utf-8")  # valid UTF-8, the name shown escaped
        if args != ["--format", "json"]:
            assert b"sub\\udcff" in out.stdout, (args, out.stdout[-500:])
