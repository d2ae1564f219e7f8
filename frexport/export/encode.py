"""RankDump back to the dict PyTorch writes, so saved snapshots read like real dumps.

`frexport analyze` and PyTorch's fr_trace both load the result. Pickles written
here contain plain data only (dicts, lists, tuples, str, int, float, bool, None).
"""

from __future__ import annotations

import json
import pickle

from frexport.model.dump import RankDump, split_group_name


def to_pytorch_dict(dump: RankDump) -> dict:
    """PyTorch's layout. Groups keep PyTorch's names (`model.dump.group_name` undone) where the dump is
    one recorder's; a rank merged from several recorders keeps frexport's (`nccl2:0` beside gloo's `0`),
    which read back the same."""
    one_recorder = len(dump.recorders) <= 1

    def name(filed: str) -> str:
        return split_group_name(filed)[0] if one_recorder else filed

    pg_config = {name(c.name): {"name": name(c.name), "desc": c.desc,
                          "ranks": "[" + ", ".join(map(str, c.ranks)) + "]" if c.ranks else "[]"}
                 for c in dump.pg_config} or {"": {"name": "", "desc": "", "ranks": "[]"}}
    pg_status = {str(s.pg_id): {"last_enqueued_collective": -1 if s.last_enqueued is None else s.last_enqueued,
                                "last_started_collective": -1 if s.last_started is None else s.last_started,
                                "last_completed_collective": -1 if s.last_completed is None else s.last_completed}
                 for s in dump.pg_status}
    entries = []
    for e in dump.entries:
        d = {
            "frames": [{"name": f.name, "filename": f.filename, "line": f.line} for f in e.frames],
            "record_id": e.record_id, "pg_id": e.pg_id, "process_group": (name(e.pg_name), e.pg_desc),
            "collective_seq_id": e.collective_seq_id, "p2p_seq_id": e.p2p_seq_id, "op_id": e.op_id,
            "profiling_name": e.profiling_name, "time_created_ns": e.time_created_ns,
            "input_sizes": [list(s) for s in e.input_sizes], "input_dtypes": list(e.input_dtypes),
            "output_sizes": [list(s) for s in e.output_sizes], "output_dtypes": list(e.output_dtypes),
            "state": e.state, "time_discovered_started_ns": e.time_started_ns,
            "time_discovered_completed_ns": e.time_completed_ns, "retired": e.retired, "timeout_ms": e.timeout_ms,
            "is_p2p": e.is_p2p,
        }
        if e.duration_ms is not None:
            d["duration_ms"] = e.duration_ms
        if e.thread_id is not None:
            d["thread_id"] = e.thread_id
        if e.thread_name is not None:
            d["thread_name"] = e.thread_name
        entries.append(d)
    out = {"version": dump.version_text or "2.10", "comm_lib_version": dump.comm_lib_version or "",
           "pg_config": pg_config, "pg_status": pg_status, "entries": entries}
    return out


def to_pickle(dump: RankDump) -> bytes:
    return pickle.dumps(to_pytorch_dict(dump), protocol=2)


def to_json(dump: RankDump) -> bytes:
    d = to_pytorch_dict(dump)
    for e in d["entries"]:
        e.pop("frames")
        e["time_discovered_started_ns"] = e["time_discovered_started_ns"] or 0
        e["time_discovered_completed_ns"] = e["time_discovered_completed_ns"] or 0
    return json.dumps(d).encode()
