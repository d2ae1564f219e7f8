"""`frexport analyze --timeline out.json`: the dumps as a Chrome/Perfetto trace-event file.

One process per rank, one thread (track) per process group; every recorded collective is a
slice from its enqueue time. Its end: enqueue + duration_ms where NCCL timed it; unfinished ops
run to the rank's last recorded event (the recorder's clock: a dump file's time may be a copy's, see
analysis/clock.py), so a collective a rank went on recording past is a long bar; otherwise (gloo
records no end) the slice runs to the next op on the same track, at most one second, and says so.
Findings are instant markers on the culprit ranks' tracks. Open in ui.perfetto.dev or
chrome://tracing.
"""

from __future__ import annotations

import json

from frexport.analysis.findings import Diagnosis
from frexport.model.call_site import frame_text
from frexport.model.rank_trace import FINISHED, RankTrace
from frexport.model.signature import describe, op_name

_MAX_UNKNOWN_US = 1_000_000


def build_timeline(traces: list[RankTrace], diagnosis: Diagnosis, ranks: set[int] | None = None) -> dict:
    traces = sorted((t for t in traces if ranks is None or t.rank in ranks), key=lambda t: t.rank)
    times = [t.first_created_ns for t in traces if t.first_created_ns]
    origin = min(times) if times else 0
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}
    for t in traces:
        events.append({"name": "process_name", "ph": "M", "pid": t.rank, "args": {"name": f"rank {t.rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": t.rank, "args": {"sort_index": t.rank}})
        for i, (name, g) in enumerate(sorted(t.groups.items())):
            tids[(t.rank, name)] = i
            label = f"pg {name}" + (f" ({g.pg_desc})" if g.pg_desc else "")
            events.append({"name": "thread_name", "ph": "M", "pid": t.rank, "tid": i, "args": {"name": label}})
            end_of_record = t.last_event_ns or 0
            for k in range(len(g.seq)):
                start = g.created_ns[k]
                if not start:
                    continue
                sig = t.signatures[g.sig[k]]
                args = {"seq": g.seq[k], "op": describe(sig)}
                site = t.call_site(g.site[k])
                if site is not None:
                    args["call_site"] = frame_text(site)
                if g.duration_us[k] >= 0:
                    dur = g.duration_us[k]
                elif not g.flags[k] & FINISHED:
                    dur = max(0, (end_of_record - start) // 1000)
                    args["state"] = "not finished when dumped"
                    args["end"] = "the rank's last recorded event"
                else:
                    nxt = g.created_ns[k + 1] if k + 1 < len(g.seq) else start
                    dur = min(_MAX_UNKNOWN_US, max(1, (nxt - start) // 1000))
                    args["end"] = "unknown (no completion time recorded): drawn until the next op"
                events.append({"name": op_name(sig), "cat": "collective", "ph": "X", "pid": t.rank, "tid": i,
                               "ts": (start - origin) / 1000, "dur": dur, "args": args})
            for op in g.p2p:
                sig = t.signatures[op.sig]
                events.append({"name": op.op, "cat": "p2p", "ph": "X", "pid": t.rank, "tid": i,
                               "ts": (op.created_ns - origin) / 1000, "dur": 1,
                               "args": {"p2p_seq": op.seq, "op": describe(sig), "peers": f"{op.src}->{op.dst}"}})
    by_rank = {t.rank: t for t in traces}
    for f in diagnosis.findings:
        for rank in f.culprit_ranks:
            if rank not in by_rank:
                continue
            t = by_rank[rank]
            when = f.time_ns or t.last_event_ns or origin
            events.append({"name": f"{f.kind}: {f.op or ''}".strip(), "cat": "finding", "ph": "i", "s": "p",
                           "pid": rank, "tid": tids.get((rank, f.pg_name), 0), "ts": (when - origin) / 1000,
                           "args": {"message": f.message, "collective_seq_id": f.collective_seq_id}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "frexport", "origin_unix_ns": origin, "verdict": diagnosis.verdict}}


def write_timeline(path: str, traces: list[RankTrace], diagnosis: Diagnosis, ranks: set[int] | None = None) -> None:
    with open(path, "w") as f:
        json.dump(build_timeline(traces, diagnosis, ranks), f)
