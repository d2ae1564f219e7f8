"""Generate realistic large Flight Recorder dump directories, as NCCL jobs write them.

    python benchmarks/gen_dumps.py --ranks 1024 --entries 2000 --out benchmarks/out/d1024
    python benchmarks/gen_dumps.py --ranks 64 --fault missing_rank --out /tmp/d64

Megatron-like topology: world = tp x pp x dp; every rank is in the default group, its tp group,
its pp group and its dp group (pg_config lists the groups the rank is in, ranks as "[a, b]").
Each training step runs, per micro-batch, pipeline recv/send (p2p on the pp group) around tp
all_reduces, then the dp gradient reduce_scatter + all_gather and a default-group all_reduce of
the loss. Ring buffers are deep into a long job (step 5000+): each rank keeps its last --entries
entries, so ranks' buffers start at different points (pipeline stages record different numbers
of ops). NCCL states: completed with duration_ms and discovered times, the newest step in flight.
Stack frames (10-25 per entry) share dict objects and strings, like torch's memoizing pickler.
Files: <prefix><rank>, pickle protocol 2, version "2.10".

Faults (--fault): missing_rank (one rank never issues the last tp all_reduce its peer waits in),
desync (one rank runs all_gather where its tp peers run all_reduce), size_mismatch.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import time
from multiprocessing import Pool

T0 = 1_795_000_000_000_000_000
STEP_NS = 1_000_000_000
FIRST_STEP = 5000
MICRO = 4
CULPRIT = 5  # the rank a fault is injected on


class Topology:
    def __init__(self, world: int, tp: int, pp: int) -> None:
        if world % (tp * pp):
            raise SystemExit(f"--ranks {world} is not a multiple of tp*pp = {tp * pp}")
        self.world, self.tp, self.pp, self.dp = world, tp, pp, world // (tp * pp)
        # c10d names groups by a global creation counter; every rank creates every group in order.
        self.names: dict[tuple[str, int], str] = {}
        counter = 1
        for kind, count in (("tp", world // tp), ("pp", world // pp), ("dp", world // self.dp)):
            for i in range(count):
                self.names[(kind, i)] = str(counter)
                counter += 1

    def groups_of(self, r: int) -> dict[str, tuple[str, list[int]]]:
        tp_i = r // self.tp
        stride = self.tp * self.dp  # ranks per pipeline stage
        pp_i = r % stride
        dp_i = (r // stride) * self.tp + r % self.tp
        return {
            "default": ("0", list(range(self.world))),
            "tp": (self.names[("tp", tp_i)], [tp_i * self.tp + k for k in range(self.tp)]),
            "pp": (self.names[("pp", pp_i)], [pp_i + k * stride for k in range(self.pp)]),
            "dp": (self.names[("dp", dp_i)],
                   [(r // stride) * stride + k * self.tp + r % self.tp for k in range(self.dp)]),
        }

    def stage(self, r: int) -> int:
        return r // (self.tp * self.dp)


GATHER_OP = "_allgather_base"  # what NCCL records for all_gather_into_tensor


def _step_ops(stage: int, pp: int, gather_op: str = GATHER_OP) -> list[tuple[str, str, int]]:
    """(group kind, op, peer stage offset) for one training step of a pipeline stage."""
    ops = []
    for _ in range(MICRO):  # forward
        if stage > 0:
            ops.append(("pp", "recv", -1))
        ops += [("tp", "all_reduce", 0), ("tp", "all_reduce", 0)]
        if stage < pp - 1:
            ops.append(("pp", "send", +1))
    for _ in range(MICRO):  # backward
        if stage < pp - 1:
            ops.append(("pp", "recv", +1))
        ops += [("tp", "all_reduce", 0), ("tp", "all_reduce", 0)]
        if stage > 0:
            ops.append(("pp", "send", -1))
    ops += [("dp", "reduce_scatter", 0), ("dp", gather_op, 0), ("default", "all_reduce", 0)]
    return ops


def _frames(rng: random.Random) -> list[list[dict]]:
    files = [f"/opt/megatron/megatron/core/{m}.py" for m in
             ("tensor_parallel/layers", "tensor_parallel/mappings", "pipeline_parallel/schedules",
              "pipeline_parallel/p2p_communication", "distributed/distributed_data_parallel",
              "transformer/transformer_layer", "transformer/attention", "transformer/mlp", "models/gpt/gpt_model")]
    torch_files = ["/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                   "/usr/local/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"]
    pool = [{"name": f"fn_{i}", "filename": files[i % len(files)], "line": 20 + 7 * i} for i in range(120)]
    top = [{"name": "all_reduce", "filename": torch_files[0], "line": 3245},
           {"name": "wrapper", "filename": torch_files[1], "line": 83}]
    train = {"name": "train_step", "filename": "/opt/megatron/pretrain_gpt.py", "line": 412}
    main = {"name": "<module>", "filename": "/opt/megatron/pretrain_gpt.py", "line": 1021}
    return [top + rng.sample(pool, rng.randint(6, 21)) + [train, main] for _ in range(24)]


def rank_dump(r: int, topo: Topology, n: int, fault: str, gather_op: str = GATHER_OP) -> dict:
    rng = random.Random(r)
    stacks = _frames(rng)
    groups = topo.groups_of(r)
    stage = topo.stage(r)
    ops = _step_ops(stage, topo.pp, gather_op)
    # Every rank runs the same steps (a job's ranks stop together); stages with more ops per step
    # keep fewer steps in their buffer.
    steps = n // min(len(_step_ops(st, topo.pp)) for st in range(topo.pp)) + 2
    first_step = FIRST_STEP
    seq = {kind: 0 for kind in groups}
    p2p_seq = 0
    # seq ids at the first generated step: every member of a group has run the same steps before it
    for kind in groups:
        per_step = sum(1 for k, op, _ in _step_ops(0 if kind != "pp" else stage, topo.pp) if k == kind
                       and op not in ("send", "recv"))
        seq[kind] = per_step * first_step
    pg_id = {"default": 0, "tp": 1, "pp": 2, "dp": 3}
    entries = []
    record = 1_000_000 + r % 7  # buffers of different ranks start at different record ids
    for step in range(first_step, first_step + steps):
        for i, (kind, op, peer) in enumerate(ops):
            name, members = groups[kind]
            created = T0 + step * STEP_NS + i * 2_000_000 + rng.randint(0, 200_000)
            is_p2p = op in ("send", "recv")
            if is_p2p:
                p2p_seq += 1
                me = members.index(r)
                other = me + peer
                profiling = f"nccl:send {me}->{other}" if op == "send" else f"nccl:recv {me}<-{other}"
            else:
                seq[kind] += 1
                profiling = f"nccl:{op}"
            size = [4096, 1024] if kind == "tp" else ([1024, 4096] if kind == "pp" else [1 << 20])
            in_sizes, out_sizes = [size], [size]
            if op == "reduce_scatter":
                out_sizes = [[size[0] // len(members)]]
            elif op == gather_op:
                in_sizes, out_sizes = [[size[0] // len(members)]], [size]
            entries.append({
                "frames": list(stacks[(i * 7 + step) % len(stacks)]), "record_id": record, "pg_id": pg_id[kind],
                "process_group": (name, kind if kind != "default" else "default_pg"),
                "collective_seq_id": seq[kind], "p2p_seq_id": p2p_seq, "op_id": record - 1_000_000,
                "profiling_name": profiling, "time_created_ns": created,
                "input_sizes": in_sizes, "input_dtypes": ["BFloat16"] * len(in_sizes),
                "output_sizes": out_sizes, "output_dtypes": ["BFloat16"] * len(out_sizes),
                "state": "completed", "time_discovered_started_ns": created + 50_000,
                "time_discovered_completed_ns": created + 1_500_000, "retired": True, "timeout_ms": 600_000,
                "is_p2p": is_p2p, "duration_ms": 1.2 + rng.random(), "thread_id": "140234",
                "thread_name": "pt_main_thread",
            })
            record += 1
    if fault == "missing_rank":
        _hang(entries, r, topo)
    entries = entries[-n:]
    in_flight = entries[-3:] if fault != "missing_rank" else ([] if r == CULPRIT else entries[-1:])
    for e in in_flight:  # the newest ops are in flight when the dump is taken
        e.update(state="started", time_discovered_completed_ns=None, retired=False)
        e.pop("duration_ms", None)
    if fault in ("desync", "size_mismatch") and r == CULPRIT:
        _mismatch(entries, fault)
    config = {}
    for kind, (name, members) in groups.items():
        desc = kind if kind != "default" else "default_pg"
        config[name] = {"name": name, "desc": desc, "ranks": "[" + ", ".join(map(str, members)) + "]"}
    status = {}
    for kind, (name, _) in groups.items():
        last = max((e["collective_seq_id"] for e in entries if e["process_group"][0] == name), default=-1)
        status[str(pg_id[kind])] = {"last_enqueued_collective": last, "last_started_collective": last,
                                    "last_completed_collective": last - 1}
    return {"version": "2.10", "comm_lib_version": "2.21.5", "pg_config": config, "pg_status": status,
            "entries": entries}


def _hang(entries: list[dict], r: int, topo: Topology) -> None:
    """The culprit stops before its last tp all_reduce; its tp peers wait in it; every other rank
    finishes the step's own work and waits in the closing default-group all_reduce."""
    culprit_tp = topo.groups_of(CULPRIT)["tp"][1]
    if r in culprit_tp:
        last_tp = max(i for i, e in enumerate(entries) if e["process_group"][1] == "tp")
        del entries[last_tp + (0 if r == CULPRIT else 1):]


def _mismatch(entries: list[dict], fault: str) -> None:
    tp = [e for e in entries if e["process_group"][1] == "tp"]
    if fault == "desync":
        tp[-40]["profiling_name"] = "nccl:all_gather"
    else:
        tp[-40]["input_sizes"] = tp[-40]["output_sizes"] = [[4096, 2048]]


def _write(args: tuple) -> int:
    r, topo, n, fault, out, prefix, gather_op = args
    d = rank_dump(r, topo, n, fault, gather_op)
    data = pickle.dumps(d, protocol=2)
    path = os.path.join(out, f"{prefix}{r}")
    with open(path, "wb") as f:
        f.write(data)
    # A healthy job's dump is an on-demand snapshot taken as it runs; a hang's is written when the
    # watchdog times out, minutes after the ranks stopped.
    newest = max(e["time_created_ns"] for e in d["entries"])
    at = newest + (600 * STEP_NS if fault == "missing_rank" else STEP_NS // 2)
    os.utime(path, ns=(at, at))
    return len(data)


def generate(ranks: int, entries: int, out: str, tp: int = 8, pp: int = 4, fault: str = "none",
             prefix: str = "nccl_trace_rank_", workers: int | None = None, gather_op: str = GATHER_OP) -> int:
    os.makedirs(out, exist_ok=True)
    topo = Topology(ranks, tp, pp)
    with Pool(workers or os.cpu_count()) as pool:
        sizes = pool.map(_write, [(r, topo, entries, fault, out, prefix, gather_op) for r in range(ranks)], chunksize=8)
    return sum(sizes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--fault", choices=("none", "missing_rank", "desync", "size_mismatch"), default="none")
    ap.add_argument("--prefix", default="nccl_trace_rank_")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--gather-op", default=GATHER_OP,
                    help="name of the dp all-gather (PyTorch's analyzer rejects NCCL's _allgather_base; "
                         "all_gather lets it run)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    start = time.time()
    total = generate(args.ranks, args.entries, args.out, args.tp, args.pp, args.fault, args.prefix, args.workers,
                     args.gather_op)
    print(f"{args.ranks} ranks x {args.entries} entries ({args.fault}) -> {args.out}: "
          f"{total / 1e6:.0f} MB in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
