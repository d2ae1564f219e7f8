"""Ranks that are not the job's never vote (issue 37, class 4): dumps in the directory of a hung job that
claim ranks of it (a previous job's leftovers, or planted) are not placed in the job when their records
end before ops the job's ranks completed and went past (a collective completes only with every member)
and their ranks lie beyond the job's; they never turn the verdict around, post-mortem or live."""

from frexport.analysis.engine import Options, analyze
from frexport.live.diagnosis import BLOCKED, STALLED, statuses_of
from tests.support.synth import STEP_NS, T0, dump, entry, traces


def _hung_job_with_planted_ranks(planted=(7, 8, 9)) -> dict[int, dict]:
    """4 gloo ranks (no member lists), rank 2 stuck before collective 3; one-entry dumps claiming ranks
    `planted` of group 0, with times inside the job's."""
    def gloo(i, seq, r, retired=True):
        return entry(i, seq, backend="gloo", state="scheduled", retired=retired, duration_ms=None,
                     created=T0 + seq * STEP_NS + r * 1000)
    out = {r: dump([gloo(0, 1, r), gloo(1, 2, r)] + ([] if r == 2 else [gloo(2, 3, r, retired=False)]))
           for r in range(4)}
    out.update({r: dump([gloo(0, 1, r)]) for r in planted})
    return out


def test_planted_ranks_beyond_the_job_do_not_vote_post_mortem():
    d = analyze(list(traces(_hung_job_with_planted_ranks()).values()))
    f = d.findings[0]
    assert (f.kind, f.culprit_ranks, f.collective_seq_id) == ("missing_rank", (2,), 3), [g.message for g in d.findings]
    assert {e.rank for e in d.input_errors} == {7, 8, 9}
    assert all(g.kind != "missing_dump" for g in d.findings), [g.message for g in d.findings]  # no ranks 4-6


def test_planted_ranks_beyond_the_job_do_not_vote_live():
    dumps = _hung_job_with_planted_ranks()
    tr = list(traces(dumps, seen_at_ns=T0 + 60 * 10**9).values())
    d = analyze(tr, options=Options(stall_after_s=5, clock=True))
    statuses = statuses_of(d, tr, 5 * 10**9)
    assert {r: statuses[r] for r in range(4)} == {0: BLOCKED, 1: BLOCKED, 2: STALLED, 3: BLOCKED}, \
        [g.message for g in d.findings]


def test_ranks_dumped_before_their_peers_went_past_an_op_cast_no_vote():
    """Within the job: two ranks whose dumps end at collective 1 although every other rank completed
    collective 2 and went past (they issued it: their dumps are older). Their absence from collective 3
    does not make the two ranks waiting in it a minority 'out of step' (a desync): rank 2, whose records
    are current and lack it, is the one that stalled."""
    dumps = _hung_job_with_planted_ranks(())
    dumps[4] = dumps[3]
    for r in (3, 4):
        dumps[r] = dump([entry(0, 1, backend="gloo", state="scheduled", retired=True, duration_ms=None,
                               created=T0 + STEP_NS + r * 1000)])
    tr = list(traces(dumps, seen_at_ns=T0 + 60 * 10**9).values())
    d = analyze(tr, options=Options(stall_after_s=5, clock=True))
    assert d.findings[0].kind == "missing_rank" and 2 in d.findings[0].culprit_ranks, \
        [g.message for g in d.findings]
    statuses = statuses_of(d, tr, 5 * 10**9)
    assert statuses[2] == STALLED and statuses[0] == statuses[1] == BLOCKED, statuses
    assert d.input_errors == []


def test_a_rank_two_peers_claim_at_once_is_never_blamed_on_the_claim():
    """The job view: a hostile peer claims rank 1 at the same moment as its real pod, so neither claim is
    used and rank 1 has no snapshot; with rank 3 really gone, the view said `missing_dump [1, 3]`. A
    contested rank is not judged: rank 3 alone is the culprit, the wait for rank 1 says why it is not."""
    dumps = {r: dump([entry(i, i + 1, backend="gloo", state="scheduled", retired=i < 2, duration_ms=None,
                            created=T0 + i * STEP_NS + r * 1000) for i in range(3)], world=4) for r in (0, 2)}
    tr = list(traces(dumps, seen_at_ns=T0 + 60 * 10**9).values())
    plain = analyze(tr, known_ranks={0, 1, 2, 3}, options=Options(stall_after_s=5, clock=True))
    assert {r for f in plain.findings for r in f.culprit_ranks} == {1, 3}  # what the claim did before
    d = analyze(tr, known_ranks={0, 1, 2, 3}, options=Options(stall_after_s=5, clock=True, contested=frozenset({1})))
    assert {r for f in d.findings for r in f.culprit_ranks} == {3}, [f.message for f in d.findings]
    assert any("which two peers claim at once" in f.message for f in d.findings), [f.message for f in d.findings]
