"""Build synthetic Flight Recorder dumps (plain dicts) for tests: NCCL-shaped data, old formats, faults.

Real captured dumps live in tests/fixtures/real; these cover what a CPU machine cannot
produce (NCCL states, durations, timeouts, p2p, coalesced ops, old format versions).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from frexport.decode.normalize import normalize
from frexport.model.rank_trace import RankTrace, build_rank_trace

T0 = 1_795_000_000_000_000_000
STEP_NS = 100_000_000


def frame(name: str, filename: str, line: int) -> dict:
    return {"name": name, "filename": filename, "line": line}


TORCH_FRAMES = [frame("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3245),
                frame("wrapper", "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 83)]


def entry(record_id: int, seq: int, op: str = "all_reduce", pg: tuple = ("0", "default_pg"), pg_id: int = 0,
          sizes=((4, 4),), dtype: str = "Float", state: str = "completed", created: int | None = None,
          duration_ms: float | None = 1.0, line: int = 10, backend: str = "nccl", retired: bool | None = None,
          p2p_seq: int = 0, is_p2p: bool = False, out_sizes=None, timeout_ms: int = 600_000,
          user_file: str = "/job/train.py") -> dict:
    created = T0 + record_id * STEP_NS if created is None else created
    done = state == "completed"
    e = {
        "record_id": record_id, "pg_id": pg_id, "process_group": tuple(pg), "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq, "op_id": seq, "profiling_name": f"{backend}:{op}",
        "time_created_ns": created, "input_sizes": [list(s) for s in sizes],
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": [list(s) for s in (sizes if out_sizes is None else out_sizes)],
        "output_dtypes": [dtype] * len(sizes if out_sizes is None else out_sizes),
        "state": state, "time_discovered_started_ns": created + 1000 if state != "scheduled" else None,
        "time_discovered_completed_ns": created + 2000 if done else None,
        "retired": done if retired is None else retired, "timeout_ms": timeout_ms, "is_p2p": is_p2p,
        "thread_id": "140000", "thread_name": "pt_main_thread",
        "frames": TORCH_FRAMES + [frame("step", user_file, line), frame("main", user_file, 99)],
    }
    if duration_ms is not None and done:
        e["duration_ms"] = duration_ms
    return e


def hook_entry(record_id: int, seq: int, push: bool, done: bool = True, backend: str = "nccl2",
               duration_ms: float | None = 1.0, **kw) -> dict:
    """An entry as torch 2.15's FlightRecorderHook writes it. Built from its source, not captured (no GPU
    was lent to capture nccl2): hooks/FlightRecorderHook.hpp and FlightRecorder.hpp `retire_completed`
    in the 2.15.0 wheel.
    - push (a backend with completion hooks: nccl2, nccl-lazy): the completion hook retires a finished op
      as `completed`, its discovered start and completion both the moment it was reported, with the
      backend's duration (None where the backend cannot time); an op not finished (hung, in flight)
      stays `scheduled` and unretired, with no times. No entry ever reads `started`.
    - no push (mpi, ucc, out-of-tree and Python backends): retired when issued, `scheduled`, no times,
      no duration, whether the op finished or not (`done` is not recorded)."""
    e = entry(record_id, seq, backend=backend, state="scheduled", retired=not push, **kw)
    if push and done:
        at = e["time_created_ns"] + int((duration_ms or 1.0) * 1e6) + 50_000
        e.update(state="completed", retired=True, time_discovered_started_ns=at, time_discovered_completed_ns=at)
        if duration_ms is not None:
            e["duration_ms"] = duration_ms
    return e


def dump(entries: list[dict], world: int | None = None, groups: dict | None = None, version: str = "2.10",
         pg_status: dict | None = None) -> dict:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world))) if world else "[]"}}
    for name, (desc, ranks) in (groups or {}).items():
        config[name] = {"name": name, "desc": desc, "ranks": str(list(ranks))}
    return {"version": version, "comm_lib_version": "2.21.5", "pg_config": config,
            "pg_status": pg_status or {}, "entries": entries}


def write(directory: Path, dumps: dict[int, dict], prefix: str = "nccl_trace_rank_", fmt: str = "pickle") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank, d in dumps.items():
        path = directory / f"{prefix}{rank}{'.json' if fmt == 'json' else ''}"
        if fmt == "json":
            path.write_text(json.dumps(d))
        else:
            path.write_bytes(pickle.dumps(d, protocol=2))
    return directory


def healthy_job(world: int = 4, steps: int = 10, **kw) -> dict[int, list[dict]]:
    """Every rank runs the same `steps` all_reduces on the default group."""
    return {r: [entry(i, i + 1, line=10, created=T0 + i * STEP_NS + r * 1000, **kw) for i in range(steps)]
            for r in range(world)}


def traces(dumps: dict[int, dict], seen_at_ns: int | None = None) -> dict[int, RankTrace]:
    """Each rank's dump decoded in-process, as the sidecar does; `seen_at_ns`: when they were taken."""
    return {r: build_rank_trace(normalize(d, f"rank {r}", "pickle", rank=r, dumped_at_ns=seen_at_ns))
            for r, d in dumps.items()}
