"""`frexport analyze` given several jobs' dumps (directories, or a shell glob over them): each job is
analysed on its own, never one culprit across jobs; jobs it cannot tell apart are refused. Real
dumps only (tests/fixtures/real: each scenario is a different run of a real torch job)."""

import json
import shutil
import subprocess
import sys

import pytest

from frexport.analysis.jobs import Source, conflict, split
from frexport.decode.load import load
from tests.support.paths import REAL_FIXTURES

FREXPORT = [sys.executable, "-m", "frexport"]
STUCK, HEALTHY, WIDE = (REAL_FIXTURES / n for n in ("stuck_before_collective", "healthy", "cross_group_order"))


def _run(*args):
    return subprocess.run([*FREXPORT, "analyze", *map(str, args)], capture_output=True, text=True, timeout=180)


def _ranks(src, dst, ranks):
    dst.mkdir(parents=True)
    for r in ranks:
        shutil.copy2(src / f"trace_{r}", dst / f"trace_{r}")
    return dst


def test_two_jobs_directories_give_one_result_each_and_no_culprit_across_them():
    out = _run(STUCK, WIDE, "--format", "json")
    assert out.returncode == 1, out.stderr
    jobs = json.loads(out.stdout)["jobs"]
    assert [j["ranks"] for j in jobs] == [[0, 1, 2, 3], list(range(8))]
    assert [j["paths"] for j in jobs] == [[str(STUCK)], [str(WIDE)]]
    assert [f["culprit_ranks"] for f in jobs[0]["findings"]] == [[2]]  # as when analysed alone
    assert [f["culprit_ranks"] for f in jobs[1]["findings"]] == [[6]]
    assert "2 jobs in these dumps" in out.stderr
    # each job's result is what it gives on its own
    alone = json.loads(_run(STUCK, "--format", "json").stdout)
    assert {k: v for k, v in jobs[0].items() if k != "paths"} == alone


def test_text_names_each_job_and_a_healthy_one_stays_healthy():
    out = _run(HEALTHY, STUCK)
    assert out.returncode == 1
    assert f"job 1 of 2: {HEALTHY} (ranks 0-3" in out.stdout and f"job 2 of 2: {STUCK} (ranks 0-3" in out.stdout
    first, second = out.stdout.split("job 2 of 2")
    assert "\nhealthy: 4 ranks" in first and "culprit: 2" in second


def test_a_glob_over_files_of_two_jobs_is_split_by_directory_and_data(tmp_path):
    files = sorted(STUCK.glob("trace_*")) + sorted(HEALTHY.glob("trace_*"))  # what `*/trace_*` expands to
    doc = json.loads(_run(*files, "--format", "json").stdout)
    assert [j["verdict"] for j in doc["jobs"]] == ["inconclusive", "healthy"]


def test_one_jobs_node_directories_are_one_job_and_json_twins_are_not_a_second_rank(tmp_path):
    node0, node1 = _ranks(WIDE, tmp_path / "node0", range(4)), _ranks(WIDE, tmp_path / "node1", range(4, 8))
    split_run = json.loads(_run(node0, node1, "--format", "json").stdout)
    assert split_run["ranks"] == list(range(8)) and split_run["findings"][0]["culprit_ranks"] == [6]
    twins = _run(STUCK, STUCK / "json", "--format", "json")
    assert json.loads(twins.stdout)["ranks"] == [0, 1, 2, 3] and "jobs in these dumps" not in twins.stderr


def test_jobs_that_cannot_be_told_apart_are_refused_naming_the_groups(tmp_path):
    # ranks 0-1 of one job, ranks 0-1 of another, and a directory holding rank 2 of one and rank 3 of
    # the other: it fits both, and nothing says which of its ranks goes where.
    a, b = _ranks(STUCK, tmp_path / "a", (0, 1)), _ranks(HEALTHY, tmp_path / "b", (0, 1))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy2(STUCK / "trace_2", mixed / "trace_2")
    shutil.copy2(HEALTHY / "trace_3", mixed / "trace_3")
    out = _run(a, b, mixed)
    assert out.returncode == 2 and out.stdout == ""
    assert f"cannot tell which job {mixed} belongs to" in out.stderr
    assert f"{a} (ranks 0, 1, world 4, groups 0 (default_pg))" in out.stderr
    assert f"{b} (ranks 0, 1, groups 0 (default_pg), 1 (tp)" in out.stderr


def test_what_tells_jobs_apart():
    stuck, healthy, wide = (Source(str(p), load([str(p)], workers=1).traces) for p in (STUCK, HEALTHY, WIDE))
    assert conflict(stuck.traces, healthy.traces) == "rank 0 twice"
    assert conflict(stuck.traces, [t for t in wide.traces if t.rank >= 4]) == "rank 7 beyond a world of 4"
    assert conflict([t for t in healthy.traces if t.rank < 2], [t for t in wide.traces if t.rank >= 4]) \
        == "recorded at different times"
    assert len(split([stuck, healthy, wide])) == 3


KILLED8 = REAL_FIXTURES / "killed_in_allreduce_8"


def _planted(tmp_path, rank: int):
    """A directory that sorts before the job's: one JSON dump claiming `rank`, holding the first entry of
    the real rank 2's (so its first recorded time is the real one's), nothing after."""
    doc = json.loads((KILLED8 / "json" / "trace_2.json").read_text())
    doc["entries"] = doc["entries"][:1]
    d = tmp_path / "aaa"
    d.mkdir()
    (d / f"trace_{rank}.json").write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_one_planted_directory_cannot_drop_split_or_veto_the_jobs_ranks(tmp_path, rank):
    """A planted rank sorting first: with the same first record as the real rank 2 it was taken as its
    twin and the real dump dropped without a word (the verdict blamed the waiting ranks); a fake rank 4
    split the job in two, rank 2 named in neither; a fake rank 3 refused the run. Now the job is what
    most of its dumps say, the planted dump is an input error, and the culprit is named."""
    node0, node1 = _ranks(KILLED8, tmp_path / "node0", range(4)), _ranks(KILLED8, tmp_path / "node1", range(4, 8))
    out = _run(_planted(tmp_path, rank), node0, node1, "--format", "json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert "jobs" not in doc and doc["ranks"] == list(range(8)), out.stderr
    assert doc["findings"][0]["culprit_ranks"] == [2], doc["findings"][0]
    errors = [e for e in doc["input_errors"] if "aaa" in e["file"]]
    assert len(errors) == 1 and f"claims rank {rank}" in errors[0]["error"], doc["input_errors"]
