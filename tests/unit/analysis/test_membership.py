"""Who belongs to which process group: from pg_config when the dumps list ranks (NCCL), rebuilt from
the recorded ops when they do not (gloo writes an empty placeholder)."""

from frexport.analysis.membership import MembershipMemo, build_membership
from tests.support.synth import dump, entry, healthy_job, traces

GLOO_PG_CONFIG = {"": {"name": "", "desc": "", "ranks": "[]"}}  # what gloo (torch 2.13) writes


def _gloo(dumps: dict[int, dict]) -> dict[int, dict]:
    for d in dumps.values():
        d["pg_config"] = dict(GLOO_PG_CONFIG)
    return dumps


def test_members_and_world_from_pg_config():
    job = healthy_job(world=4, steps=2)
    dumps = {r: dump(es, world=4, groups={"5": ("tp", [r - r % 2, r - r % 2 + 1])}) for r, es in job.items()}
    m = build_membership(traces(dumps))
    # each pair of ranks reports its own tp group under the same name: one group per member set
    assert sorted((g.key, g.members) for g in m.groups.values() if g.name == "nccl:5") == [("nccl:5@0", (0, 1)),
                                                                                             ("nccl:5@1", (2, 3))]
    assert m.group_of[(3, "nccl:5")] == "nccl:5@1" and m.group_of[(0, "nccl:5")] == "nccl:5@0"
    assert m.groups["nccl:0"].members == (0, 1, 2, 3) and m.groups["nccl:0"].label == "nccl:0 (default_pg)"
    assert (m.world_size, m.world_size_inferred) == (4, False)
    assert m.notes == ["process group 'nccl:5' has 2 different member sets across ranks"]


def test_a_rank_listed_in_two_member_sets_of_one_name_is_in_the_one_it_reports():
    """Ranks 0-2 say group 5 is [0, 1, 2]; ranks 3-5 say it is [0, 3, 4, 5]. Rank 0 issued its group-5 ops in the
    group its own pg_config names: they are matched with ranks 1 and 2, not with 3-5."""
    job = healthy_job(world=6, steps=2)
    dumps = {r: dump(es, world=6, groups={"5": ("tp", [0, 1, 2] if r < 3 else [0, 3, 4, 5])}) for r, es in job.items()}
    m = build_membership(traces(dumps))
    assert sorted((g.key, g.members) for g in m.groups.values() if g.name == "nccl:5") == [
        ("nccl:5@0", (0, 1, 2)), ("nccl:5@1", (0, 3, 4, 5))]
    assert [m.group_of[(r, "nccl:5")] for r in range(6)] == ["nccl:5@0"] * 3 + ["nccl:5@1"] * 3


def test_gloo_membership_inferred_from_the_ops_each_rank_recorded():
    job = healthy_job(world=4, steps=3, backend="gloo")
    for r in (2, 3):  # only ranks 2 and 3 use the pipeline group
        job[r].append(entry(3, 1, pg=("5", "pp"), pg_id=1, backend="gloo"))
    m = build_membership(traces(_gloo({r: dump(es) for r, es in job.items()})))
    assert m.groups["0"].members == (0, 1, 2, 3)  # the default group spans the world
    assert m.groups["5"].members == (2, 3) and m.groups["5"].desc == "pp"
    assert (m.world_size, m.world_size_inferred) == (4, True)  # the highest rank seen, plus one
    assert len(m.notes) == 1 and "membership inferred" in m.notes[0]


def test_gloo_world_includes_ranks_known_without_a_dump():
    """A rank whose dump is missing still counts: the sidecar knows it from its sockets or URLs."""
    job = healthy_job(world=2, steps=2, backend="gloo")
    m = build_membership(traces(_gloo({r: dump(es) for r, es in job.items()})), known_ranks={0, 1, 2, 3, 4})
    assert m.world_size == 5 and m.groups["0"].members == (0, 1, 2, 3, 4)


def test_global_rank_of_a_group_local_peer():
    job = healthy_job(world=4, steps=1)
    m = build_membership(traces({r: dump(es, world=4, groups={"7": ("pp", [3, 1])}) for r, es in job.items()}))
    g = m.groups["nccl:7"]
    assert g.members == (1, 3)  # group rank i is the i-th smallest global rank: new_group sorts them
    assert (g.global_rank(0), g.global_rank(1), g.global_rank(2), g.global_rank(None)) == (1, 3, None, None)


def test_a_live_analysis_builds_the_groups_again_only_where_what_they_rest_on_changed():
    job = healthy_job(world=4, steps=2)
    for r in (0, 1):
        job[r].append(entry(3, 1, pg=("5", "tp"), pg_id=1))
    ts = traces({r: dump(es, world=4, groups={"5": ("tp", [r - r % 2, r - r % 2 + 1])}) for r, es in job.items()})
    memo = MembershipMemo()
    first = memo.build(ts, set(), {})
    assert first == build_membership(ts, set(), {})
    t = ts[1]
    assert len(t.groups) == 2
    t.groups = dict(reversed(t.groups.items()))  # a followed window lists its groups in another order
    assert memo.build(ts, set(), {1: ("nccl:0", 9)}) is first  # behind counts not where configs size the world
    # a rank's config changes (a group made): built again, as from scratch
    t.pg_config = traces({1: dump(job[1], world=4, groups={"5": ("tp", [0, 1]), "6": ("pp", [1, 3])})})[1].pg_config
    again = memo.build(ts, set(), {})
    assert again is not first and again == build_membership(ts, set(), {}) and "nccl:6" in again.groups
    assert memo.build(ts, {0, 1, 2, 3, 7}, {}).world_size == 4  # (the configs say it)
    # the first build of a view with ranks behind, where configs size the world: the next pass, the same
    # configs and other ranks behind, takes it as it is
    memo = MembershipMemo()
    first = memo.build(ts, set(), {2: ("nccl:0", 5)})
    assert memo.build(ts, set(), {3: ("nccl:0", 6)}) is first

    # gloo: no config sizes the world; a rank whose records end behind its peers' is not placed in it
    gloo = healthy_job(world=4, steps=3, backend="gloo")
    gloo[9] = gloo[3][:1]
    ts = traces(_gloo({r: dump(es) for r, es in gloo.items()}))
    memo = MembershipMemo()
    assert memo.build(ts, set(), {}).world_size == 10
    behind = {9: ("0", 1)}
    m = memo.build(ts, set(), behind)
    assert (m.world_size, m.unplaced) == (4, (9,)) and m == build_membership(ts, set(), behind)
    assert memo.build(ts, {0, 1, 2, 3, 4}, behind).world_size == 5
