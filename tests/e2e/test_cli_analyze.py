"""`frexport analyze` as a user runs it: output shape, exit codes, filters, raw view, timeline."""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time

from tests.support.fake_rank import FakeRank
from tests.support.paths import REAL_FIXTURES
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
                      "call_site", "message", "reason", "certain", "waited"}
    assert f["certain"] is False and "do not say how long" in f["reason"]
    assert f["process_group"] == {"name": "0", "desc": "default_pg", "backend": "nccl"}
    assert (f["kind"], f["culprit_ranks"], f["blocked_ranks"]) == ("missing_rank", [2], [0, 1, 3])


def test_healthy_prints_a_verdict_and_exits_0(tmp_path):
    d = write(tmp_path / "ok", {r: dump(es, world=4) for r, es in healthy_job().items()})
    out = _run("analyze", d)
    assert out.returncode == 0
    assert out.stdout.splitlines()[0] == "healthy: 4 ranks (0-3), 10 collectives matched across 1 process group"


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
    # with a threshold longer than anything the dumps show, rank 2 is a suspect, never healthy: the
    # files' times (10 s after) are no clock in a post-mortem, so they cannot clear it either
    early = json.loads(_run("analyze", d, "--format", "json", "--stall-after", "60").stdout)
    assert early["verdict"] == "inconclusive" and early["findings"][0]["culprit_ranks"] == [2]


def test_stuck_after_is_a_deprecated_alias_of_stall_after(tmp_path):
    d = _seen_10s_after(tmp_path)
    old = _run("analyze", d, "--format", "json", "--stuck-after", "60")
    assert old.stderr == "frexport analyze: --stuck-after is deprecated, use --stall-after\n"
    assert old.stdout == _run("analyze", d, "--format", "json", "--stall-after", "60").stdout
    old = _run("analyze", d, "--format", "json", "--stuck-after", "5")
    assert json.loads(old.stdout)["findings"][0]["culprit_ranks"] == [2]
    helptext = _run("analyze", "--help").stdout
    assert "--stall-after" in helptext and "--stuck-after" not in helptext


def _stuck_with_a_tp_group(tmp_path):
    """The stuck job whose ranks also ran (and finished) collectives in a tp group."""
    job = healthy_job()
    for r in range(4):
        job[r].insert(0, entry(100, 1, pg=("1", "tp"), pg_id=1, created=T0 - STEP_NS))
    for r in (0, 1, 3):  # timed out waiting for rank 2: a hang without a clock
        job[r].append(entry(10, 11, state="scheduled", retired=True, line=10))
    return write(tmp_path / "dumps", {r: dump(es, world=4, groups={"1": ("tp", range(4))}) for r, es in job.items()})


def test_a_filter_that_matches_nothing_is_a_usage_error_naming_what_exists(tmp_path):
    d = _stuck_dir(tmp_path)
    out = _run("analyze", d, "--selected-ranks", "7")
    assert out.returncode == 2 and out.stdout == ""
    assert "--selected-ranks 7: no such rank" in out.stderr and "ranks: 0-3" in out.stderr
    out = _run("analyze", d, "--pg-filters", "nosuchpg", "--format", "json")
    assert out.returncode == 2 and out.stdout == ""
    assert "--pg-filters nosuchpg: no such process group" in out.stderr and "0 (default_pg)" in out.stderr
    assert _run("analyze", d, "--raw", "--selected-ranks", "9").returncode == 2


def test_a_filter_that_hides_findings_says_so_and_never_turns_healthy(tmp_path):
    d = _stuck_with_a_tp_group(tmp_path)
    out = _run("analyze", d, "--pg-filters", "tp")
    assert out.returncode == 1, out.stdout
    assert out.stdout.startswith("unhealthy outside the filter: 1 finding in 4 ranks (0-3), none shown; "
                                 "first: rank 2 "), out.stdout
    doc = json.loads(_run("analyze", d, "--pg-filters", "tp", "--format", "json").stdout)
    assert doc["verdict"] == "unhealthy" and doc["findings"] == [] and doc["outside_filter"] == 1
    shown = _run("analyze", d, "--pg-filters", "default_pg")
    assert shown.returncode == 1 and shown.stdout.startswith("unhealthy: 1 finding")
    assert "outside the filter" not in shown.stdout


def test_a_file_that_is_no_dump_is_rejected_with_the_reason(tmp_path):
    (tmp_path / "trace_0.json").write_text(json.dumps({"a": 1}))
    out = _run("analyze", tmp_path)
    assert out.returncode == 2, out.stdout
    assert not out.stdout.startswith("healthy")
    assert "trace_0.json: not a Flight Recorder dump" in out.stdout
    d = _stuck_dir(tmp_path / "job")
    (d / "nccl_trace_rank_4").write_bytes(pickle.dumps({"a": 1}))
    doc = json.loads(_run("analyze", d, "--format", "json").stdout)
    assert doc["ranks"] == [0, 1, 2, 3] and "not a Flight Recorder dump" in doc["input_errors"][0]["error"]


def test_a_path_that_does_not_exist_is_named(tmp_path):
    out = _run("analyze", tmp_path / "nonexistent")
    assert out.returncode == 2 and out.stdout == ""
    assert f"{tmp_path / 'nonexistent'}: no such file or directory" in out.stderr
    d = _stuck_dir(tmp_path)  # a typo next to a real directory is not silently a smaller job
    assert _run("analyze", d, tmp_path / "dumsp").returncode == 2
    assert _run("analyze", d / "nccl_trace_rank_").returncode == 1  # a PyTorch-style prefix still works


def test_one_process_group_is_one(tmp_path):
    # real gloo dumps: pg_config holds an unnamed placeholder beside the default group, not a second group
    out = _run("analyze", REAL_FIXTURES / "slow_rank", "--straggler-ms", "100000")
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith("healthy: 4 ranks (0-3), 13 collectives matched across 1 process group\n")


def test_snapshot_refuses_a_directory_that_holds_files(tmp_path):
    sockets, outdir = tmp_path / "sockets", tmp_path / "snap"
    sockets.mkdir()
    outdir.mkdir()
    (outdir / "trace_3").write_bytes(b"an older snapshot")
    rank = FakeRank(0, str(sockets / "rank-0.sock"), 1, time.time() - 5)
    try:
        out = _run("snapshot", outdir, "--sockets-dir", sockets)
        assert out.returncode == 2 and "not empty" in out.stderr and "--force" in out.stderr
        assert sorted(p.name for p in outdir.iterdir()) == ["trace_3"]
        out = _run("snapshot", outdir, "--sockets-dir", sockets, "--force")
        assert out.returncode == 0, out.stderr
        assert sorted(p.name for p in outdir.iterdir()) == ["trace_0.json", "trace_3"]
        assert _run("snapshot", tmp_path / "new", "--sockets-dir", sockets).returncode == 0
    finally:
        rank.close()


def _copy_stuck(tmp_path, name, mtime_ns=None):
    d = tmp_path / name
    d.mkdir()
    for r in range(4):
        f = d / f"trace_{r}"
        f.write_bytes((REAL_FIXTURES / "stuck_before_collective" / f"trace_{r}").read_bytes())
        if mtime_ns is not None:
            os.utime(f, ns=(mtime_ns, mtime_ns))
    return d


def test_a_rank_missing_where_its_peers_wait_is_never_healthy_whatever_the_file_times(tmp_path):
    old = 1_577_836_800 * 10**9  # touch -d 2020-01-01: before every recorded entry
    future = 1_893_456_000 * 10**9  # touch -d 2030-01-01: after every entry, and after now
    texts, docs = set(), set()
    for d in (_copy_stuck(tmp_path, "touched", old), _copy_stuck(tmp_path, "cloned"),  # and mtime = now
              _copy_stuck(tmp_path, "future", future)):
        out = _run("analyze", d, "--format", "json")
        doc = json.loads(out.stdout)
        assert out.returncode == 1 and doc["verdict"] != "healthy", (d, out.stdout)
        assert [(f["kind"], f["culprit_ranks"]) for f in doc["findings"]] == [("missing_rank", [2])]
        assert doc["findings"][0]["waited"]["clock"] == "recorder"  # the recorder's own times, not a file's
        text = _run("analyze", d).stdout
        # the hang lasted seconds: no duration from a file time days after (or years before) it
        assert not re.search(r"\d{3,}\.\d s", text), text
        assert "rank 3 waited at least 0.2 ms (until rank 1's last recorded event)" in text, text
        texts.add(text.replace(str(d), "DIR"))
        docs.add(out.stdout.replace(str(d), "DIR"))
    assert len(texts) == 1 and len(docs) == 1, texts  # verdict, culprit and every duration: the same


def test_durations_say_what_they_were_measured_against(tmp_path):
    job = healthy_job()
    for r in (0, 1, 3):  # the watchdog timed them out waiting for rank 2: proven without a clock
        job[r].append(entry(10, 11, state="scheduled", retired=True, line=10))
    d = write(tmp_path / "dumps", {r: dump(es, world=4) for r, es in job.items()})
    last_entry = T0 + 10 * STEP_NS
    texts = set()
    # copied files (older than what they hold), and file times 20 s after the issue: after the fact
    # neither is a clock, and the watchdog's timeout (600 s) says the ranks waited longer than 20 s
    for stamp in (T0 - 10**12, last_entry + 20 * 10**9):
        for f in d.iterdir():
            os.utime(f, ns=(stamp, stamp))
        text = _run("analyze", d).stdout
        assert "the oldest for at least 600.0 s (rank 0's watchdog timeout, timeout_ms, expired)" in text, text
        assert "dump time" not in text, text
        texts.add(text)
    assert len(texts) == 1, texts


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


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`... | frexport inject - | head`: the pipe closes while frexport still writes (far more than a
    pipe buffer holds)."""
    pods = "".join(f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\n"
                   f"spec: {{containers: [{{name: t, image: t}}]}}\n" for i in range(500))
    proc = subprocess.Popen([*FREXPORT, "inject", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdin.write(pods.encode())
    proc.stdin.close()
    proc.stdout.read(10)
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141 and "Traceback" not in err, err


def _pending(pid: int, sig: int) -> bool:
    """Whether `sig` waits to be delivered to process `pid` (its handler has not run yet)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return False
    return any(m & (1 << (sig - 1)) for m in masks)


def test_ctrl_c_stops_the_analysis_with_one_line_and_no_traceback(tmp_path):
    # Ctrl-C reaches the terminal's whole process group: the CLI and its decoder processes. Before,
    # each printed its own KeyboardInterrupt traceback (66 lines for one Ctrl-C).
    from tests.support.proctree import descendants

    one = pickle.dumps(dump(healthy_job(world=1, steps=2000)[0], world=256))
    directory = tmp_path / "dumps"
    directory.mkdir()
    for r in range(256):
        (directory / f"nccl_trace_rank_{r}").write_bytes(one)
    # SIGINT at its default in the CLI, as under a terminal: a test run started in the background (`cmd &`
    # in a script) ignores it, the CLI would inherit that, and Python then never turns it into Ctrl-C
    proc = subprocess.Popen(FREXPORT + ["analyze", str(directory), "--workers", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (decoders := descendants(proc.pid)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        # The analysis is running: it waits for its decoders' results. Freeze them, so that it cannot
        # finish before the signal lands however loaded the machine is (it failed that way before).
        for pid in decoders:
            os.kill(pid, signal.SIGSTOP)
        assert decoders and proc.poll() is None, "the analysis ended before its decoders were seen"
        os.killpg(proc.pid, signal.SIGINT)
        while proc.poll() is None and _pending(proc.pid, signal.SIGINT) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the CLI has taken the signal: then let its decoders be stopped as usual
        for pid in decoders:
            os.kill(pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "frexport: interrupted" and "Traceback" not in err, err


def test_snapshot_takes_two_looks_and_analyze_decides_by_them(tmp_path):
    """`frexport snapshot --rounds 2 --gap S` writes look_1/, look_2/ and when it saw each rank;
    `analyze` of that directory says per group whether it moved (issue 27, deliverable 6)."""
    sockets, outdir = tmp_path / "sockets", tmp_path / "snap"
    sockets.mkdir()
    ranks = [FakeRank(r, str(sockets / f"rank-{r}.sock"), 2, time.time() - 5) for r in range(2)]
    try:
        out = _run("snapshot", outdir, "--sockets-dir", sockets, "--rounds", "2", "--gap", "1")
        assert out.returncode == 0 and "2 looks, each rank seen 1." in out.stdout, out.stdout + out.stderr
        assert "cannot show a hang" in out.stderr and "--stall-after 1" in out.stderr
    finally:
        for rank in ranks:
            rank.close()
    assert sorted(p.name for p in outdir.iterdir()) == ["look_1", "look_2", "looks.json"]
    seen = json.loads((outdir / "looks.json").read_text())["seen_s"]
    assert all(0.9 <= seen[1][r] - seen[0][r] < 5 for r in ("0", "1"))
    doc = json.loads(_run("analyze", outdir, "--format", "json").stdout)
    assert [g["state"] for g in doc["looks"]["groups"]] == ["progressing"]  # the fake ranks run on


def test_analyze_of_two_looks_of_a_hung_real_job_is_certain(tmp_path):
    out = _run("analyze", REAL_FIXTURES / "two_looks_hung")
    assert out.returncode == 1 and out.stdout.startswith("unhealthy: 1 finding"), out.stdout
    assert "between two looks (6.0 s apart):\n  group 0 (default_pg): hung, no rank moved; ranks 0, 1, 3 wait in it" \
        in out.stdout


def test_two_looks_are_as_far_apart_as_asked_for_every_rank_even_when_a_look_is_slow(tmp_path):
    """The README's two looks decide: each rank is looked at again no sooner than the gap after it
    answered the first look (looks of many ranks take seconds; spacing only their starts left the last
    rank 3.1 s apart when 6 s were asked), the gap reported is the one measured, and the default gap
    is the least that can show a hang to `analyze` at its default threshold. Fake ranks: a real rank's
    slow first answer (a loaded machine, a cold handler) cannot be produced on demand."""
    sockets, outdir = tmp_path / "sockets", tmp_path / "snap"
    sockets.mkdir()
    # a cold first answer per rank: the first look takes about 3 s, the second a moment
    ranks = [FakeRank(r, str(sockets / f"rank-{r}.sock"), 3, time.time() - 5, first_answer_s=1.0) for r in range(3)]
    try:
        out = _run("snapshot", outdir, "--sockets-dir", sockets, "--rounds", "2", "--gap", "2")
    finally:
        for rank in ranks:
            rank.close()
    assert out.returncode == 0, out.stderr
    seen = json.loads((outdir / "looks.json").read_text())["seen_s"]
    apart = [seen[1][r] - seen[0][r] for r in ("0", "1", "2")]
    assert min(apart) >= 2.0 - 1e-5, apart  # (looks.json keeps microseconds)
    assert f"each rank seen {min(apart):.1f} s or more apart" in out.stdout, out.stdout


def test_snapshot_rounds_are_bounded():
    out = _run("snapshot", "/nonexistent-out", "--sockets-dir", "/nonexistent", "--rounds", "1000")
    assert out.returncode == 2 and "--rounds" in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_snapshot_never_writes_through_a_link_planted_in_its_output(tmp_path):
    """A directory others can write to: `look_1` planted as a link to a victim directory, and links
    under the temp names the old scheme used, redirected a rank's dump onto a victim file (issue 38
    point 5). Nothing is written through them; the snapshot says what it could not write."""
    sockets, outdir, victim = tmp_path / "sockets", tmp_path / "snap", tmp_path / "victim"
    sockets.mkdir()
    outdir.mkdir()
    victim.mkdir()
    (victim / "trace_0.json").write_text("victim")
    os.symlink(victim, outdir / "look_1")
    for pid in range(os.getpid(), os.getpid() + 200):  # the old temp names of the next processes
        os.symlink(victim / "trace_0.json", outdir / f".looks.json.{pid}.tmp")
    rank = FakeRank(0, str(sockets / "rank-0.sock"), 1, time.time() - 5)
    try:
        out = _run("snapshot", outdir, "--sockets-dir", sockets, "--rounds", "2", "--gap", "1", "--force")
    finally:
        rank.close()
    assert (victim / "trace_0.json").read_text() == "victim" and sorted(p.name for p in victim.iterdir()) == \
        ["trace_0.json"]
    assert "look 1: rank 0 (gloo recorder): not written" in out.stderr and "symbolic link" in out.stderr, out.stderr
    assert (outdir / "look_2" / "trace_0.json").exists()
