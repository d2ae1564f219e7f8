"""Issue 28, deliverable 2: every number that sizes an allocation is checked against the job's size
before use. `frexport analyze` runs in a child process under an address-space limit, so a regression
fails here with a MemoryError instead of taking the machine's memory."""

import json
import resource
import subprocess
import sys

import pytest

from tests.support.synth import dump, entry, healthy_job, write

FREXPORT = [sys.executable, "-m", "frexport"]


def _limited() -> None:  # 3 GiB: a set of a billion ranks needs ~40 GiB
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))


def _analyze(*args) -> subprocess.CompletedProcess:
    return subprocess.run(FREXPORT + ["analyze", *map(str, args)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limited)


def _stuck(world: int = 4) -> dict:
    """Rank 3 never issues collective 11: the culprit every test below must still name."""
    job = healthy_job(world=world)
    for r in range(world - 1):
        job[r].append(entry(10, 11, state="scheduled", duration_ms=None))
    return job


@pytest.mark.parametrize("member", [1_000_000_000, 100_000])
def test_a_member_rank_outside_the_job_drops_that_list_not_the_analysis(tmp_path, member):
    dumps = {r: dump(es, world=4) for r, es in _stuck().items()}
    dumps[2]["pg_config"]["0"]["ranks"] = f"[0, 1, 2, {member}]"
    d = write(tmp_path / "d", dumps, fmt="json")
    p = _analyze("--format", "json", d)
    assert "MemoryError" not in p.stderr and p.returncode == 1, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["ranks"] == [0, 1, 2, 3]
    assert [(f["kind"], f["culprit_ranks"]) for f in out["findings"]] == [("missing_rank", [3])]  # no missing_dump
    text = _analyze("-v", d).stdout  # and it says what it ignored
    assert "member list" in text and "rank 2" in text, text


@pytest.mark.parametrize("field", ["timeout_ms", "collective_seq_id", "time_created_ns"])
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("fmt", ["json", "pickle"])
def test_an_out_of_range_number_in_one_rank_breaks_neither_that_rank_nor_the_others(tmp_path, field, sign, fmt):
    job = _stuck()
    job[1][0][field] = sign * 10 ** 400  # the oldest entry: timeouts are sampled from the edges
    if field == "timeout_ms":
        for e in job[1]:
            e[field] = sign * 10 ** 400
    p = _analyze("--format", "json", write(tmp_path / "d", {r: dump(es, world=4) for r, es in job.items()}, fmt=fmt))
    assert p.returncode == 1, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["ranks"] == [0, 1, 2, 3] and out["input_errors"] == []  # an OverflowError made rank 1 unreadable
    assert [f["culprit_ranks"] for f in out["findings"]] == [[3]]


@pytest.mark.parametrize("ranks", ["0-100000000000", "5-2", "-1", "0,262144"])
def test_selected_ranks_out_of_any_job_is_refused_before_it_is_built(tmp_path, ranks):
    d = write(tmp_path / "d", {r: dump(es, world=2) for r, es in healthy_job(world=2).items()})
    p = _analyze("--selected-ranks", ranks, d)
    assert p.returncode == 2 and "MemoryError" not in p.stderr
    assert "not a rank" in p.stderr, p.stderr
