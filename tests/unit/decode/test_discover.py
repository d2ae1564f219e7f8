"""Finding dumps among the files a real dump directory holds."""

import os
import pickle

from frexport.decode.discover import default_locations, discover, parse_name
from tests.support.synth import dump, entry


def _dump_bytes(seq=1):
    return pickle.dumps(dump([entry(0, seq)], world=2), protocol=2)


def test_names():
    assert parse_name("nccl_trace_rank_12") == (12, "nccl_trace_rank_#", None)
    assert parse_name("trace_3.json")[:1] == (3,)
    assert parse_name("nccl_trace_rank_host7_40")[0] == 40
    assert parse_name("job-3_rank5_attempt1")[0] == 5
    assert parse_name("README") is None and parse_name("trace_1795338697123") is None


def test_twins_prefer_pickle_and_skip_noise(tmp_path):
    for r in range(2):
        (tmp_path / f"trace_{r}").write_bytes(_dump_bytes())
        (tmp_path / f"trace_{r}.json").write_text('{"version": "2.10"}')
    (tmp_path / "README.md").write_text("hi")
    (tmp_path / "trace_2.tmp").write_text("partial")
    found = discover([str(tmp_path)])
    assert sorted(found.by_rank) == [0, 1]
    assert all(files[0].path.endswith(f"trace_{r}") for r, files in found.by_rank.items())
    skipped = dict(found.skipped)
    assert "not a dump" in skipped[str(tmp_path / "README.md")]
    assert "partial" in skipped[str(tmp_path / "trace_2.tmp")]


def test_host_names_and_subdirectories(tmp_path):
    for host, ranks in (("host7", (0, 1)), ("host8", (2, 3))):
        d = tmp_path / host
        d.mkdir()
        for r in ranks:
            (d / f"nccl_trace_rank_{host}_{r}").write_bytes(_dump_bytes())
    assert sorted(discover([str(tmp_path)]).by_rank) == [0, 1, 2, 3]


def test_two_families_and_prefix_override(tmp_path):
    for r in range(3):
        (tmp_path / f"trace_{r}").write_bytes(_dump_bytes())
    (tmp_path / "other_0").write_bytes(_dump_bytes())
    found = discover([str(tmp_path)])
    assert sorted(found.by_rank) == [0, 1, 2] and any("other_#" in n for n in found.notes)
    assert sorted(discover([str(tmp_path)], prefix="other_").by_rank) == [0]


def test_newest_attempt_wins(tmp_path):
    for attempt in (0, 1):
        d = tmp_path / f"attempt_{attempt}"
        d.mkdir()
        p = d / "trace_0"
        p.write_bytes(_dump_bytes(seq=attempt + 1))
        os.utime(p, ns=(10**18 + attempt * 10**12, 10**18 + attempt * 10**12))
    files = discover([str(tmp_path)]).by_rank[0]
    assert files[0].path.endswith("attempt_1/trace_0") and len(files) == 2


def test_path_prefix_and_default_locations(tmp_path):
    for r in range(2):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(_dump_bytes())
    assert sorted(discover([str(tmp_path / "nccl_trace_rank_")]).by_rank) == [0, 1]
    locs = default_locations({"TORCH_FR_DUMP_TEMP_FILE": "/shared/fr/trace_", "HOME": "/home/u"})
    assert locs[0] == "/shared/fr/trace_" and "/home/u/.cache/torch/comm_lib_trace_rank_" in locs
    assert "/tmp/nccl_trace_rank_" in locs


def test_symlinks_are_not_followed_by_default(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(_dump_bytes())
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "trace_0").write_bytes(_dump_bytes())
    (d / "trace_1").symlink_to(outside)
    found = discover([str(d)])
    assert sorted(found.by_rank) == [0] and "symbolic link" in dict(found.skipped)[str(d / "trace_1")]
    assert sorted(discover([str(d)], follow_symlinks=True).by_rank) == [0, 1]


def test_odd_file_names(tmp_path):
    prefix = "t\u00e4st (copy) ;rm -rf $HOME_"  # spaces, shell characters, non-ASCII: just bytes in a name
    for r in range(3):
        (tmp_path / f"{prefix}{r}").write_bytes(_dump_bytes())
    (tmp_path / "trace_2\nx").write_bytes(_dump_bytes())  # a newline: no rank at the end, skipped
    (tmp_path / f"{prefix}\u0665").write_bytes(_dump_bytes())  # an Arabic-Indic digit is rank 5
    found = discover([str(tmp_path)])
    assert sorted(found.by_rank) == [0, 1, 2, 5]
    assert "no rank" in dict(found.skipped)[str(tmp_path / "trace_2\nx")]


def test_a_snapshots_other_recorders_are_not_read_as_more_files_of_its_ranks(tmp_path):
    """`frexport snapshot` of a rank with two recorders writes the second into recorder-<name>/: the
    same ranks, other groups. They must not compete with the first's files (the newest would win)."""
    from frexport.decode.discover import discover

    for d in (tmp_path, tmp_path / "recorder-nccl2"):
        d.mkdir(exist_ok=True)
        for r in range(2):
            (d / f"trace_{r}").write_bytes(b"x")
    found = discover([str(tmp_path)])
    assert {r: [f.path for f in fs] for r, fs in found.by_rank.items()} == \
        {r: [str(tmp_path / f"trace_{r}")] for r in range(2)}
    assert any("recorder-nccl2" in n for n in found.notes)
    assert set(discover([str(tmp_path / "recorder-nccl2")]).by_rank) == {0, 1}
