"""One rank, several Flight Recorders (torch 2.14's CUDA wheels, 2.15's hooked backends): one dump."""

from frexport.decode.normalize import normalize
from frexport.live.state import LiveState
from frexport.model.dump import group_name
from frexport.model.recorders import RECORD_ID_SPAN, Shifter, merge_recorders, record_offset, recorder_record_id
from tests.support.synth import entry


def _dump(backend: str, n: int, pg: str = "0"):
    raw = {"version": "2.10", "pg_config": {pg: {"name": pg, "desc": "default_pg", "ranks": "[0, 1]"}},
           "pg_status": {}, "entries": [{**entry(i, i + 1), "profiling_name": f"{backend}:all_reduce",
                                         "process_group": [pg, "default_pg"]} for i in range(n)]}
    return normalize(raw, f"rank0-{backend}", "json", rank=0, dumped_at_ns=10**18)


def test_one_group_on_two_backends_is_two_groups_with_their_own_sequences():
    merged = merge_recorders({"nccl2": _dump("nccl2", 3), "gloo": _dump("gloo", 5)})
    assert merged.recorders == ("gloo", "nccl2")
    assert {c.name for c in merged.pg_config} == {"0", "nccl2:0"}
    assert [e.pg_name for e in merged.entries] == ["0"] * 5 + ["nccl2:0"] * 3
    rids = [e.record_id for e in merged.entries]
    assert rids == sorted(rids) and len(set(rids)) == 8  # unique and ascending: the live state's cursor rules
    assert [recorder_record_id(r) for r in rids] == [0, 1, 2, 3, 4, 0, 1, 2]
    groups = LiveState()
    groups.ingest(merged, "x", 10**18)
    assert set(groups.view().ranks[0].groups) == {"0", "nccl2:0"}


def test_ranges_do_not_depend_on_which_recorders_exist():
    alone = merge_recorders({"nccl2": _dump("nccl2", 2)})
    both = merge_recorders({"nccl2": _dump("nccl2", 2), "gloo": _dump("gloo", 1)})
    assert [e.record_id for e in alone.entries] == [e.record_id for e in both.entries if e.pg_name != "0"]
    assert record_offset("gloo") == 0 and record_offset("nccl2") % RECORD_ID_SPAN == 0 < record_offset("nccl2")


def test_unchanged_entries_are_moved_once():
    shift = Shifter("nccl2")
    d = _dump("nccl2", 3)
    first = shift(d.entries)
    assert all(a is b for a, b in zip(first, shift(d.entries)))


def test_a_name_already_filed_is_not_filed_twice():
    assert group_name(group_name("0", "nccl2"), "nccl2") == "nccl2:0"
    assert group_name("0", "gloo") == group_name("0", "") == "0"


def test_a_recorders_status_rows_are_filed_under_its_groups_names():
    """pg_status is keyed by the process-local pg_id: gloo's pg 0 and nccl2's pg 0 are two groups, and a
    row whose group has no op in the buffer has no name to be filed under."""
    from frexport.model.dump import ProcessGroupStatus
    from frexport.model.recorders import group_statuses, pg_names

    dumps = {"gloo": _dump("gloo", 2), "nccl2": _dump("nccl2", 3)}
    rows = {"gloo": (ProcessGroupStatus(0, 2, -1, 2), ProcessGroupStatus(7, 1, -1, 1)),
            "nccl2": (ProcessGroupStatus(0, 3, 3, 2),)}
    names = {r: pg_names(d) for r, d in dumps.items()}
    assert group_statuses(rows, names) == {"0": rows["gloo"][0], "nccl2:0": rows["nccl2"][0]}
    assert group_statuses({"ucc": rows["gloo"]}, names) == {}  # a recorder without entries read yet
