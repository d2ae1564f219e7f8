"""A rank that leaves the job between collectives (issue 37, class 1), on a real torch 2.13 gloo job
(tests/realjobs/scenarios/uneven_exit.py): 8 ranks, dp {0-3}, {4-7}; rank 3's data runs out after step 5
and it exits with status 0 (uneven inputs). In the next dp all_reduce its ring neighbours 0 and 2 fail
out ("Connection closed by peer"; gloo retires failed work, so it looks completed), rank 1 waits in it,
and ranks 4-7 wait in the default group for 0-3. Ranks 0 and 2 are victims of rank 3, never culprits,
whether rank 3's last dump holds everything it did, is older than its departure, is missing, or holds no
entry (taken as it exited: torch empties the recorder then); with
and without the stacks of the others; post-mortem on every file-time variant and live."""

import json
import pickle
import shutil

import pytest

from frexport.live.diagnosis import BLOCKED, DOWN, STALLED
from tests.support import paths
from tests.support.captured import live_pass
from tests.support.filetimes import copies

FIXTURES = paths.REAL_FIXTURES
HEAD = ("rank 3 left the job after collective 6 of group 1 (dp); ranks 0 and 2 failed out of collective 7 "
        "(all_reduce), rank 1 waits in it; ranks 4-7 are blocked behind it")


# what rank 3's worker server answered as its process exited (captured): torch had emptied the recorder
EMPTY = {"comm_lib_version": "", "nccl_comm_state": {}, "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}},
         "pg_status": {}, "version": "2.10"}
DUMPS = ["present", "stale", "missing", "empty"]


def _variant(tmp_path, dump: str, stacks: bool = True):
    """The job's dumps with rank 3's last dump `present` (taken after its last step), `stale` (taken
    before it left), `missing`, or `empty` (taken as it exited); the others' stacks beside them or not."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / ("uneven_exit_stale" if dump == "stale" else "uneven_exit"), src)
    if dump == "missing":
        (src / "trace_3").unlink()
        (src / "json" / "trace_3.json").unlink()
    if dump == "empty":
        (src / "trace_3").write_bytes(pickle.dumps(EMPTY))
        (src / "json" / "trace_3.json").write_text(json.dumps(EMPTY))
    if not stacks:
        shutil.rmtree(src / "stacks")
    return src


@pytest.mark.parametrize("stacks", [True, False], ids=["stacks", "no_stacks"])
@pytest.mark.parametrize("dump", DUMPS)
def test_the_rank_that_left_is_the_culprit_its_ring_neighbours_its_victims(diagnose, tmp_path, dump, stacks):
    src = _variant(tmp_path, dump, stacks)
    out = {v: diagnose(d) for v, d in copies(src, tmp_path / "v")}
    assert len({json.dumps(d.to_json(), sort_keys=True) for d in out.values()}) == 1  # file times change nothing
    d = out["captured"]
    f = d.findings[0]
    assert d.verdict == "unhealthy" and f.certain and f.root_cause, [(g.kind, g.message) for g in d.findings]
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.pg_desc, f.collective_seq_id) == (
        "missing_rank", (3,), (0, 1, 2, 4, 5, 6, 7), "dp", 7)
    assert f.message == HEAD
    assert "uneven inputs" in f.reason and "a clean exit" in f.reason
    assert not any({0, 2} & set(g.culprit_ranks) for g in d.findings), [g.message for g in d.findings]
    assert ("rank 3 did not answer at the look that took the others' stacks" in f.reason) == stacks
    if dump == "stale":
        assert "rank 3's records end at collective 4: a dump taken before it left" in f.reason
    if dump == "missing":
        assert f.reason.endswith("it left no dump")
    if dump == "empty":
        assert f.reason.endswith("rank 3's dump holds no entry (one taken as the process exits: torch empties "
                                 "the recorder then)")
    if dump in ("missing", "empty"):
        assert "(dp) taken to include rank 3 (no record)" in " ".join(d.notes)


@pytest.mark.parametrize("down", [False, True], ids=["up", "down"])
@pytest.mark.parametrize("dump", DUMPS)
def test_live_the_rank_that_left_is_stalled_the_others_blocked(tmp_path, dump, down):
    """The sidecar's pass, rank 3's worker server refusing (`down`: its process is gone) or not known to
    it. A rank the sidecar has neither a snapshot of nor a refusing socket for is another pod's: its
    ranks are blocked waiting for a remote rank, the job-level view names it (docs/multi-node.md)."""
    live = live_pass(_variant(tmp_path, dump), down=frozenset({3}) if down else frozenset())
    f = live.diagnosis.findings[0]
    if dump == "missing" and not down:
        assert (f.kind, f.blocked_ranks) == ("remote_wait", (0, 1, 2, 4, 5, 6, 7)), f.message
        assert live.statuses == dict.fromkeys((0, 1, 2, 4, 5, 6, 7), BLOCKED)
        live = live_pass(_variant(tmp_path / "view", dump), scoped=False)  # the job-level view: rank 3 is missing
        assert live.diagnosis.findings[0].message == HEAD
        assert live.statuses == {3: STALLED, **dict.fromkeys((0, 1, 2, 4, 5, 6, 7), BLOCKED)}
        return
    assert (f.kind, f.culprit_ranks, f.certain, f.message) == ("missing_rank", (3,), True, HEAD), f.message
    assert live.new_root_causes == [f]
    assert live.statuses == {3: DOWN if down else STALLED, **dict.fromkeys((0, 1, 2, 4, 5, 6, 7), BLOCKED)}


@pytest.mark.parametrize("seen_after_s", [1, 60])
def test_live_an_empty_recorder_counts_only_once_its_peers_waited_past_the_threshold(seen_after_s):
    """A rank whose recorder holds no entry yet (a job's first collective, a rank slow to start) is not
    blamed while its peers have waited less than the stall threshold; a minute later it never issued it."""
    from frexport.analysis.engine import Options, analyze
    from tests.support.synth import T0, dump, entry, traces

    dumps = {r: dump([entry(0, 1, state="scheduled", backend="gloo", duration_ms=None, created=T0)], world=4)
             for r in range(3)}
    dumps[3] = dump([], world=4)
    d = analyze(list(traces(dumps, seen_at_ns=T0 + seen_after_s * 10**9).values()),
                options=Options(stall_after_s=5, clock=True))
    assert [(f.kind, f.culprit_ranks, f.certain) for f in d.findings] == (
        [] if seen_after_s == 1 else [("missing_rank", (3,), True)]), [f.message for f in d.findings]
