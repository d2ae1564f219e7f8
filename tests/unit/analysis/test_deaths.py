"""Ranks that left the job (issue 27, class 2), on real torch 2.13 gloo jobs (tests/realjobs): a
rank SIGKILLed inside a ring all_reduce, and a job that collapsed after a rank was killed between
collectives. Members that failed out because a peer vanished are victims, never culprits; every
diagnosis is the same with captured, fresh and back-dated file times."""

import json
import shutil

from tests.support import paths
from tests.support.filetimes import copies

FIXTURES = paths.REAL_FIXTURES


def _only(d):
    assert len(d.findings) == 1, [(f.kind, f.message) for f in d.findings]
    return d.findings[0]


def _same_everywhere(diagnose, src, tmp_path):
    out = {}
    for variant, d in copies(src, tmp_path):
        out[variant] = diagnose(d)
    docs = {v: json.dumps(d.to_json(), sort_keys=True) for v, d in out.items()}
    assert len(set(docs.values())) == 1, docs
    return out["captured"]


def test_rank_killed_inside_an_all_reduce_is_named_not_its_ring_neighbours(diagnose, tmp_path):
    """Rank 2 was killed inside all_reduce 7: its ring neighbours 1 and 3 failed out of it (retired,
    as completed work is), rank 0 waits in it. Its stack is missing from the look that took the
    others': it left; 1 and 3 are its victims."""
    d = _same_everywhere(diagnose, FIXTURES / "killed_in_allreduce", tmp_path)
    f = _only(d)
    assert d.verdict == "unhealthy" and f.certain and f.root_cause
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id) == ("missing_rank", (2,), (0, 1, 3), 7)
    assert f.message.startswith("rank 2 left the job inside all_reduce")
    assert "ranks 1 and 3 failed out of it (victims" in f.message
    assert "rank 2 did not" in f.reason
    assert f.call_site.endswith("killed_in_allreduce.py:24 train_step")


def test_without_stacks_the_death_is_narrowed_not_guessed(diagnose, tmp_path):
    """The same dumps without the stacks: in a 4-ring ranks 0 and 2 both neighbour 1 and 3, so the
    dumps cannot say which of them vanished. Never the neighbours that failed out."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "killed_in_allreduce", src)
    shutil.rmtree(src / "stacks")
    d = _same_everywhere(diagnose, src, tmp_path / "v")
    f = _only(d)
    assert d.verdict == "inconclusive" and not f.certain
    assert (f.kind, f.culprit_ranks, f.blocked_ranks) == ("missing_rank", (0, 2), (1, 3))
    assert "which of ranks 0 and 2 left, the dumps do not say" in f.reason


def test_json_twins_alone_give_the_same_reasoning(diagnose, tmp_path):
    d = _same_everywhere(diagnose, FIXTURES / "killed_in_allreduce" / "json", tmp_path)
    f = _only(d)
    assert (f.kind, f.culprit_ranks, f.certain) == ("missing_rank", (0, 2), False)
    assert f.call_site is None


def test_job_that_collapsed_after_a_death_is_never_healthy(diagnose, tmp_path):
    """Rank 3 was killed between collectives; 0 and 2 failed in the next all_reduce and exited, then
    rank 1 did too: every dump is the last its rank answered (0-2 caught in all_reduce 7, 3 before it),
    no stack was taken. Rank 3 is the suspect; nothing in the dumps times the others' wait."""
    d = _same_everywhere(diagnose, FIXTURES / "died_between_collectives", tmp_path)
    f = _only(d)
    assert d.verdict == "inconclusive" and not f.certain
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.collective_seq_id) == ("missing_rank", (3,), (0, 1, 2), 7)


def test_ranks_without_a_stack_at_the_look_left_the_job(diagnose, tmp_path):
    """The collapsed job, had 0-2 still answered one look: their stacks beside the dumps (a rank blocked
    in all_reduce: the killed_in_allreduce job's rank 0) and none for rank 3, whose records end before
    the collective: it left the job. Had only rank 1 answered, the look says nothing of 0 and 2 (not
    asked, or gone: the files do not tell), and rank 3 stays a suspect."""
    stack = FIXTURES / "killed_in_allreduce" / "stacks" / "rank_0.txt"
    for answered, certain in (((0, 1, 2), True), ((1,), False)):
        src = tmp_path / f"src{len(answered)}"
        shutil.copytree(FIXTURES / "died_between_collectives", src)
        (src / "stacks").mkdir(exist_ok=True)
        for r in answered:
            shutil.copy(stack, src / "stacks" / f"rank_{r}.txt")
        d = _same_everywhere(diagnose, src, tmp_path / f"v{len(answered)}")
        f = _only(d)
        assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("missing_rank", (3,), (0, 1, 2), certain)
        assert f.message.startswith("rank 3 left the job before all_reduce") == certain


def test_stacks_of_only_some_ranks_conclude_nothing(diagnose, tmp_path):
    """An evidence bundle keeps only the stuck ranks' stacks: a rank without one was not asked."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "killed_in_allreduce", src)
    for r in (1, 3):
        (src / "stacks" / f"rank_{r}.txt").unlink()
    f = _only(_same_everywhere(diagnose, src, tmp_path / "v"))
    assert (f.culprit_ranks, f.certain) == ((0, 2), False)


def test_crashed_rank_neighbours_are_victims(diagnose, tmp_path):
    """The older fixture (rank 3 raised between collectives, 0 and 2 failed out, 1 waits)."""
    d = _same_everywhere(diagnose, FIXTURES / "crashed_rank", tmp_path)
    f = _only(d)
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("missing_rank", (3,), (0, 1, 2), True)


def test_the_ring_names_the_rank_whose_neighbours_failed_in_a_larger_group():
    """Beyond four members a dying rank's two ring neighbours are its own: the ring decides. With
    four, ranks 0 and 2 share neighbours 1 and 3 and it does not."""
    from frexport.analysis.departure import vanished
    from frexport.analysis.membership import Group

    eight = Group("0", "0", "default_pg", tuple(range(8)))
    assert vanished(eight, (4, 6), [0, 1, 2, 3, 5, 7]) == ((5,), ["ranks 4 and 6 are the ring neighbours of rank 5"])
    assert vanished(eight, (7, 1), [0, 2, 3, 4, 5, 6])[0] == (0,)  # the ring wraps around
    four = Group("0", "0", "default_pg", (0, 1, 2, 3))
    assert vanished(four, (1, 3), [0, 2]) == ((0, 2), [])
    assert vanished(four, (1, 3), [0, 2], alive={0, 1, 3})[0] == (2,)  # the stacks of the same look decide


def test_in_a_ring_of_eight_the_dead_ranks_neighbours_name_it(diagnose, tmp_path):
    """8 ranks, rank 2 killed inside all_reduce 7: its ring neighbours 1 and 3 failed out (real gloo
    fails exactly those), 0 and 4-7 wait. The ring names rank 2 from the dumps alone, a suspect
    without a clock; with the stacks of the same look (rank 2's is missing) it is certain."""
    src = FIXTURES / "killed_in_allreduce_8"
    f = _only(_same_everywhere(diagnose, src / "json", tmp_path / "json"))
    assert (f.kind, f.culprit_ranks, f.blocked_ranks, f.certain) == ("missing_rank", (2,), (0, 1, 3, 4, 5, 6, 7),
                                                                      False)
    assert "ranks 1 and 3 are the ring neighbours of rank 2" in f.reason
    f = _only(_same_everywhere(diagnose, src, tmp_path / "all"))
    assert (f.culprit_ranks, f.certain) == ((2,), True)
