"""Generate large, realistic Flight Recorder dump directories, as NCCL jobs write them.

    python benchmarks/gen_dumps.py --ranks 1024 --entries 2000 --out benchmarks/out/d1024
    python benchmarks/gen_dumps.py --ranks 64 --fault missing_rank --out /tmp/d64 --workers 2

One pickle per rank, `<prefix><rank>` (default prefix nccl_trace_rank_), protocol 2, the dict torch
2.13 writes (version "2.10"): version, pg_config, comm_lib_version, pg_status (int values), entries.

The job (Megatron-LM style GPT pretraining, NCCL, TORCH_NCCL_ENABLE_TIMING=1):
- world = tp x dp x pp, rank = stage*(tp*dp) + d*tp + t. Every rank is in the default PG ('0') and
  in one tp, one dp and one pp group. Groups are created in Megatron's order (dp groups - each with a
  gloo twin, which takes a c10d name but is not an NCCL PG -, then tp groups, then pp groups); every
  rank calls new_group for every group, so names are global creation counters, and pg_id is the
  rank-local creation order of the NCCL PGs it belongs to (default 0, dp 1, tp 2, pp 3).
  pg_config lists those 4 groups with global ranks as a string "[0, 1, 2]".
- each training step is a 1F1B pipeline schedule over --micro-batches micro-batches with sequence
  parallelism: per layer tp all-gathers / reduce-scatters (nccl:_all_gather_base,
  nccl:_reduce_scatter_base, BFloat16 [seq/tp, 1, hidden] <-> [seq, 1, hidden]), embedding
  reduce-scatter on the first stage, the output layer and vocab-parallel cross-entropy (three Float
  all_reduces) on the last, pipeline send/recv on the pp group (batch_isend_irecv: the individual
  nccl:send/nccl:recv entries plus the nccl:coalesced entry, same p2p_seq_id), then
  finalize_model_grads: dp reduce-scatter of the Float grad buckets, tp all_reduce of the
  layer-norm grads (Float), the distributed optimizer's dp all-gather of the BFloat16 param buckets,
  a default-PG all_reduce; every 10th step the timers all-gather and a barrier on the default PG.
- the dump is taken deep into the job (step ~50000): each rank keeps its last --entries entries,
  so ranks' buffers start at different points (stages record different numbers of ops per step,
  and record_id has a per-rank offset); collective_seq_id / p2p_seq_id / op_id continue per PG.
- states as NCCL reports them: completed entries have duration_ms, both discovered times (watchdog
  ticks, 100 ms apart) and retired=True; entries inside a batch_isend_irecv are recorded without
  CUDA events (ProcessGroupNCCL records ops inside a coalescing group with null start/end events;
  read in the source, not observed on a GPU), so they stay 'scheduled', never retired, without
  times, while their nccl:coalesced entry completes; the work in flight at the dump is 'started'
  (launched, not complete) or 'scheduled'.
- frames: 10-23 Python frames per entry on the compute path (7-9 for the step-level barrier, layer-norm
  all_reduce and lone isend/irecv, whose real stacks are that shallow), innermost first, torch internals at the top
  (distributed_c10d.py + c10d_logger.py wrapper, torch 2.13 line numbers), Megatron in the middle,
  pretrain_gpt.py <module> at the bottom. Identical frames are the same dict objects and identical
  strings the same str objects, so pickle writes BINGET references exactly as torch's memoizing
  pickler does.

The last step is simulated across all ranks (which op can complete given who issued what; a rank
blocks in an op that cannot complete, pipeline sends are asynchronous), so a fault produces the real
cascade: the culprit's group hangs, pipeline neighbours wait in recv, the other dp replicas wait in
the dp all-gather, everybody else in the default-PG all_reduce. Dumps of a hang are written when the
watchdog times out (file mtime = stall + 600 s).

--fault:
  none          healthy job, dumped on demand: on every rank the last dp all-gather is 'started'
                and the closing default-PG all_reduce 'scheduled'.
  missing_rank  the culprit never issues its tp group's last all_reduce of the step (layer-norm
                grads); its 7 tp peers hang in it.
  desync        in the middle of the last step the culprit runs an all_reduce (another code path,
                other frames) where its tp peers run _all_gather_base; the tp group hangs there.
  size_mismatch same place, the culprit's all-gather has a shorter sequence (input [496, 1, 8192]
                instead of [512, 1, 8192]); the tp group hangs there.
  not_completed every member of the culprit's group issues the collective (same op, sizes, dtypes)
                and it never finishes (a network or communicator hang below PyTorch).
--fault-group dp moves missing_rank and not_completed to the culprit's data-parallel group (its
first gradient reduce-scatter of the step), a group that spans pods when tp fills a pod: its dp
peers hang there, then everyone else behind them. --fault-group tp_mid puts missing_rank and
not_completed in the middle of the step's forward pass (a tp all-gather): the pipeline neighbours
then wait in recv, so the hang spreads through pp and dp groups across pods.
The culprit is --culprit (default: drawn from --seed, never rank 0). generate() returns a dict
describing the fault (culprit, process group, sequence id); the CLI prints it as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import time
from collections import defaultdict, deque
from multiprocessing import get_context

DEFAULT_PREFIX = "nccl_trace_rank_"
VERSION = "2.10"
COMM_LIB_VERSION = "2.21.5"
TIMEOUT_MS = 600_000
STEP_NS = 1_000_000_000  # ~1 s per training step
JOB_START_NS = 1_790_000_000_000_000_000  # 2026-09-21
WATCHDOG_NS = 100_000_000  # ProcessGroupNCCL watchdog loop period
LOG_INTERVAL = 10
SEQ_LEN, HIDDEN, MICRO_BATCH = 4096, 8192, 1
VOCAB = 128256
INIT_OPS = 37  # FR records of init_process_group/checkpoint load before step 1 (same on every rank)
FAULTS = ("none", "missing_rank", "desync", "size_mismatch", "not_completed")
FAULT_GROUPS = ("tp", "dp", "tp_mid")

# ---------------------------------------------------------------------------------------------
# stack frames (innermost first), torch 2.13 line numbers, Megatron-core-like paths


TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
C10D = TORCH + "/distributed/distributed_c10d.py"
LOGGER = TORCH + "/distributed/c10d_logger.py"
FUNCTION = TORCH + "/autograd/function.py"
MODULE = TORCH + "/nn/modules/module.py"
AUTOGRAD = TORCH + "/autograd/__init__.py"
GRAPH = TORCH + "/autograd/graph.py"
CONTEXTLIB_T = TORCH + "/utils/_contextlib.py"
CONTEXTLIB = "/usr/lib/python3.12/contextlib.py"
MEG = "/workspace/megatron-lm/megatron"
MAPPINGS = MEG + "/core/tensor_parallel/mappings.py"
LAYERS = MEG + "/core/tensor_parallel/layers.py"
CROSS_ENTROPY = MEG + "/core/tensor_parallel/cross_entropy.py"
ATTENTION = MEG + "/core/transformer/attention.py"
MLP = MEG + "/core/transformer/mlp.py"
TLAYER = MEG + "/core/transformer/transformer_layer.py"
TBLOCK = MEG + "/core/transformer/transformer_block.py"
GPT = MEG + "/core/models/gpt/gpt_model.py"
EMBEDDING = MEG + "/core/models/common/embeddings/language_model_embedding.py"
LM = MEG + "/core/models/common/language_module/language_module.py"
SCHEDULES = MEG + "/core/pipeline_parallel/schedules.py"
P2P = MEG + "/core/pipeline_parallel/p2p_communication.py"
BUFFER = MEG + "/core/distributed/param_and_grad_buffer.py"
DDP = MEG + "/core/distributed/distributed_data_parallel.py"
FINALIZE = MEG + "/core/distributed/finalize_model_grads.py"
DIST_OPT = MEG + "/core/optimizer/distrib_optimizer.py"
OPTIMIZER = MEG + "/core/optimizer/optimizer.py"
TIMERS = MEG + "/core/timers.py"
TRAINING = MEG + "/training/training.py"
UTILS = MEG + "/training/utils.py"
PRETRAIN = "/workspace/megatron-lm/pretrain_gpt.py"

# Megatron for torch 2.13 calls all_gather_single / reduce_scatter_single (all_gather_into_tensor and
# reduce_scatter_tensor are deprecated wrappers of them); NCCL still records nccl:_all_gather_base /
# nccl:_reduce_scatter_base for these (ProcessGroupNCCL::_allgather_base / _reduce_scatter_base).
ALL_GATHER_TOP = [("all_gather_single", C10D, 4387), ("wrapper", LOGGER, 83)]
REDUCE_SCATTER_TOP = [("reduce_scatter_single", C10D, 4936), ("wrapper", LOGGER, 83)]
ALL_REDUCE_TOP = [("all_reduce", C10D, 3245), ("wrapper", LOGGER, 83)]
BARRIER_TOP = [("barrier", C10D, 5349), ("wrapper", LOGGER, 83)]
TRAIN_TAIL = [("train_step", TRAINING, 1187), ("train", TRAINING, 1964), ("pretrain", TRAINING, 412),
              ("<module>", PRETRAIN, 300)]


def _fwd_tail(sched_line: int) -> list:
    return [("forward", GPT, 264), ("_call_impl", MODULE, 1789), ("forward_step", PRETRAIN, 204),
            ("forward_step", SCHEDULES, 275),
            ("forward_backward_pipelining_without_interleaving", SCHEDULES, sched_line)] + TRAIN_TAIL


def _bwd_tail(sched_line: int) -> list:
    return [("_engine_run_backward", GRAPH, 979), ("backward", AUTOGRAD, 395),
            ("custom_backward", SCHEDULES, 164), ("backward_step", SCHEDULES, 366),
            ("forward_backward_pipelining_without_interleaving", SCHEDULES, sched_line)] + TRAIN_TAIL


def _block(module_file: str, module_line: int, layer_line: int) -> list:
    return [("forward", module_file, module_line), ("_call_impl", MODULE, 1789),
            ("forward", TLAYER, layer_line), ("_call_impl", MODULE, 1789),
            ("forward", TBLOCK, 549), ("_call_impl", MODULE, 1789)]


def _sites() -> dict[str, list[tuple[str, str, int]]]:
    col = [("forward", LAYERS, 471), ("apply", FUNCTION, 625),
           ("linear_with_grad_accumulation_and_async_allreduce", LAYERS, 706), ("forward", LAYERS, 1017),
           ("_call_impl", MODULE, 1789)]
    row_rs = [("_reduce_scatter_along_first_dim", MAPPINGS, 210), ("forward", MAPPINGS, 330),
              ("apply", FUNCTION, 625), ("reduce_scatter_to_sequence_parallel_region", MAPPINGS, 489),
              ("forward", LAYERS, 1247), ("_call_impl", MODULE, 1789)]
    col_bwd_ag = [("backward", LAYERS, 520), ("apply", FUNCTION, 313)]
    col_bwd_rs = [("backward", LAYERS, 566), ("apply", FUNCTION, 313)]
    row_bwd_ag = [("_gather_along_first_dim", MAPPINGS, 148), ("backward", MAPPINGS, 336),
                  ("apply", FUNCTION, 313)]
    fwd_w, fwd_s = 1745, 1789  # warmup / steady-state forward_step calls in the schedule
    bwd_s, bwd_c = 1826, 1871  # steady-state / cooldown backward_step calls
    s = {
        "emb_rs": REDUCE_SCATTER_TOP + row_rs[:4] + [("forward", LAYERS, 262), ("_call_impl", MODULE, 1789),
                                                     ("forward", EMBEDDING, 109), ("_call_impl", MODULE, 1789),
                                                     ("forward", GPT, 241)] + _fwd_tail(fwd_s)[1:],
        "out_ag": ALL_GATHER_TOP + col + [("forward", GPT, 298), ("_call_impl", MODULE, 1789),
                                          ("forward_step", PRETRAIN, 204), ("forward_step", SCHEDULES, 275),
                                          ("forward_backward_pipelining_without_interleaving",
                                           SCHEDULES, fwd_s)] + TRAIN_TAIL,
        "emb_bwd_ag": ALL_GATHER_TOP + row_bwd_ag + _bwd_tail(bwd_s),
        "out_bwd_ag": ALL_GATHER_TOP + col_bwd_ag + _bwd_tail(bwd_s),
        "out_bwd_rs": REDUCE_SCATTER_TOP + col_bwd_rs + _bwd_tail(bwd_s),
        "ln_ar": ALL_REDUCE_TOP + [("_allreduce_non_tensor_model_parallel_grads", FINALIZE, 123),
                                   ("finalize_model_grads", FINALIZE, 389),
                                   ("forward_backward_pipelining_without_interleaving", SCHEDULES, 1911)]
        + TRAIN_TAIL,
        "dp_rs": REDUCE_SCATTER_TOP + [("start_grad_sync", BUFFER, 384), ("finish_grad_sync", BUFFER, 427),
                                       ("finish_grad_sync", DDP, 456), ("finalize_model_grads", FINALIZE, 365),
                                       ("forward_backward_pipelining_without_interleaving", SCHEDULES, 1911)]
        + TRAIN_TAIL,
        "dp_ag": ALL_GATHER_TOP + [("start_param_sync", BUFFER, 259), ("start_param_sync", DDP, 427),
                                   ("step_with_ready_grads", DIST_OPT, 2076), ("decorate_context", CONTEXTLIB_T, 120),
                                   ("step", OPTIMIZER, 535), ("decorate_context", CONTEXTLIB_T, 120)] + TRAIN_TAIL,
        # found_inf check of the optimizer step (grad-stats group = the whole job here)
        "default_ar": ALL_REDUCE_TOP + [("_unscale_main_grads_and_check_for_nan", OPTIMIZER, 501),
                                        ("prepare_grads", OPTIMIZER, 521), ("decorate_context", CONTEXTLIB_T, 120),
                                        ("step", OPTIMIZER, 530), ("decorate_context", CONTEXTLIB_T, 120)]
        + TRAIN_TAIL,
        "timers_ag": ALL_GATHER_TOP + [("_get_elapsed_time_all_ranks", TIMERS, 330),
                                       ("_get_global_min_max_time", TIMERS, 357),
                                       ("_get_global_min_max_time_string", TIMERS, 376), ("log", TIMERS, 446),
                                       ("training_log", TRAINING, 1387), ("train", TRAINING, 2050),
                                       ("pretrain", TRAINING, 412), ("<module>", PRETRAIN, 300)],
        # timers('interval-time').start(barrier=True) of a logging step
        "barrier": BARRIER_TOP + [("start", TIMERS, 173), ("train_step", TRAINING, 1170)] + TRAIN_TAIL[1:],
        # desync: the culprit runs the attention output projection without sequence parallelism
        "att_ar_nosp": ALL_REDUCE_TOP + [("_reduce", MAPPINGS, 31), ("forward", MAPPINGS, 259),
                                         ("apply", FUNCTION, 625),
                                         ("reduce_from_tensor_model_parallel_region", MAPPINGS, 463),
                                         ("forward", LAYERS, 1243), ("_call_impl", MODULE, 1789)]
        + _block(ATTENTION, 708, 427) + _fwd_tail(1789),
    }
    for tag, line in (("max", 34), ("pred", 70), ("sum", 76)):
        s["ce_" + tag] = ALL_REDUCE_TOP + [("calculate_predicted_logits" if tag == "pred" else "forward",
                                            CROSS_ENTROPY, line), ("apply", FUNCTION, 625),
                                           ("vocab_parallel_cross_entropy", CROSS_ENTROPY, 232),
                                           ("compute_language_model_loss", LM, 55), ("forward", GPT, 312),
                                           ("_call_impl", MODULE, 1789), ("forward_step", PRETRAIN, 204),
                                           ("forward_step", SCHEDULES, 275),
                                           ("forward_backward_pipelining_without_interleaving", SCHEDULES,
                                            fwd_s)] + TRAIN_TAIL
    for phase, sched in (("w", fwd_w), ("s", fwd_s)):
        s[f"att_ag_{phase}"] = ALL_GATHER_TOP + col + _block(ATTENTION, 598, 427) + _fwd_tail(sched)
        s[f"att_rs_{phase}"] = REDUCE_SCATTER_TOP + row_rs + _block(ATTENTION, 708, 427) + _fwd_tail(sched)
        s[f"mlp_ag_{phase}"] = ALL_GATHER_TOP + col + _block(MLP, 115, 503) + _fwd_tail(sched)
        s[f"mlp_rs_{phase}"] = REDUCE_SCATTER_TOP + row_rs + _block(MLP, 150, 503) + _fwd_tail(sched)
    for phase, sched in (("s", bwd_s), ("c", bwd_c)):
        for mod in ("att", "mlp"):
            s[f"{mod}_bwd_ag_out_{phase}"] = ALL_GATHER_TOP + row_bwd_ag + _bwd_tail(sched)
            s[f"{mod}_bwd_ag_in_{phase}"] = ALL_GATHER_TOP + col_bwd_ag + _bwd_tail(sched)
            s[f"{mod}_bwd_rs_{phase}"] = REDUCE_SCATTER_TOP + col_bwd_rs + _bwd_tail(sched)
    # pipeline p2p (batch_isend_irecv): individual ops and the coalesced end
    p2p_calls = {"recv_forward": (1741, 1784), "send_forward": (1752, 1797), "recv_backward": (1866, 1866),
                 "send_backward": (1879, 1838), "send_forward_recv_backward": (1800, 1800),
                 "send_backward_recv_forward": (1843, 1843)}
    p2p_lines = {"recv_forward": 470, "send_forward": 518, "recv_backward": 494, "send_backward": 542,
                 "send_forward_recv_backward": 566, "send_backward_recv_forward": 592}
    for call, (line_a, line_b) in p2p_calls.items():
        for variant, sched in (("a", line_a), ("b", line_b)):
            outer = [("_communicate", P2P, 404), (call, P2P, p2p_lines[call]),
                     ("forward_backward_pipelining_without_interleaving", SCHEDULES, sched)] + TRAIN_TAIL
            batched = [("_batched_p2p_ops", P2P, 196)]
            s[f"{call}_{variant}_isend"] = [("isend", C10D, 2652), ("batch_isend_irecv", C10D, 3053),
                                            ("wrapper", LOGGER, 83)] + batched + outer
            s[f"{call}_{variant}_irecv"] = [("irecv", C10D, 2709), ("batch_isend_irecv", C10D, 3053),
                                            ("wrapper", LOGGER, 83)] + batched + outer
            s[f"{call}_{variant}_end"] = [("_coalescing_manager", C10D, 2928), ("__exit__", CONTEXTLIB, 144),
                                          ("batch_isend_irecv", C10D, 3051), ("wrapper", LOGGER, 83)] \
                + batched + outer
            s[f"{call}_{variant}_send"] = [("isend", C10D, 2652), ("_p2p_ops", P2P, 263)] + outer
            s[f"{call}_{variant}_recv"] = [("irecv", C10D, 2709), ("_p2p_ops", P2P, 271)] + outer
    return s


SITES = _sites()
for _k, _v in SITES.items():  # 10-25 frames on the compute path; step-level calls are shallower for real
    assert 7 <= len(_v) <= 25 and _v[-1][0] == "<module>", (_k, len(_v))

# ---------------------------------------------------------------------------------------------
# topology


class Topology:
    def __init__(self, world: int, tp: int, pp: int) -> None:
        if world % (tp * pp):
            raise SystemExit(f"--ranks {world} is not a multiple of tp*pp = {tp * pp}")
        if SEQ_LEN % tp:
            raise SystemExit(f"--tp {tp} must divide the sequence length {SEQ_LEN}")
        self.world, self.tp, self.pp, self.dp = world, tp, pp, world // (tp * pp)
        self.per_stage = tp * self.dp
        # c10d group names: a global counter bumped by every new_group call on every rank. Megatron
        # creates the dp groups (NCCL + a gloo twin each), then tp, then pp groups.
        counter = 1
        self.dp_names, self.tp_names, self.pp_names = {}, {}, {}
        for stage in range(pp):
            for t in range(tp):
                self.dp_names[(stage, t)] = str(counter)
                counter += 2
        for stage in range(pp):
            for d in range(self.dp):
                self.tp_names[(stage, d)] = str(counter)
                counter += 1
        for d in range(self.dp):
            for t in range(tp):
                self.pp_names[(d, t)] = str(counter)
                counter += 1

    def coords(self, r: int) -> tuple[int, int, int]:
        return r // self.per_stage, (r % self.per_stage) // self.tp, r % self.tp

    def rank(self, stage: int, d: int, t: int) -> int:
        return stage * self.per_stage + d * self.tp + t

    def group_names(self, r: int) -> dict[str, tuple[str, int]]:
        """kind -> (c10d name, group size), without building member lists (4096 x 4096 ints)."""
        stage, d, t = self.coords(r)
        return {"default": ("0", self.world), "dp": (self.dp_names[(stage, t)], self.dp),
                "tp": (self.tp_names[(stage, d)], self.tp), "pp": (self.pp_names[(d, t)], self.pp)}

    def groups(self, r: int) -> dict[str, tuple[str, list[int]]]:
        """kind -> (c10d name, global ranks), in the rank's PG creation order (= pg_id)."""
        stage, d, t = self.coords(r)
        return {
            "default": ("0", list(range(self.world))),
            "dp": (self.dp_names[(stage, t)], [self.rank(stage, k, t) for k in range(self.dp)]),
            "tp": (self.tp_names[(stage, d)], [self.rank(stage, d, k) for k in range(self.tp)]),
            "pp": (self.pp_names[(d, t)], [self.rank(s, d, t) for s in range(self.pp)]),
        }


PG_ID = {"default": 0, "dp": 1, "tp": 2, "pp": 3}
PG_DESC = {"default": "default_pg", "dp": "dp", "tp": "tp", "pp": "pp"}

# ---------------------------------------------------------------------------------------------
# what one training step issues, per pipeline stage


class Op:
    """One FR entry: a collective, a p2p op, or the nccl:coalesced end of a batch_isend_irecv."""

    __slots__ = ("pg", "name", "site", "in_sizes", "in_dtype", "out_sizes", "out_dtype", "peer", "tag",
                 "dur")

    def __init__(self, pg, name, site, in_sizes=(), in_dtype="BFloat16", out_sizes=None, out_dtype=None,
                 peer=0, tag="", dur=(0.2, 1.0)):
        self.pg, self.name, self.site = pg, name, site
        self.in_sizes = [list(s) for s in in_sizes]
        self.out_sizes = self.in_sizes if out_sizes is None else [list(s) for s in out_sizes]
        self.in_dtype = in_dtype
        self.out_dtype = in_dtype if out_dtype is None else out_dtype
        self.peer, self.tag, self.dur = peer, tag, dur

    def copy(self, **kw) -> "Op":
        o = Op.__new__(Op)
        for k in Op.__slots__:
            setattr(o, k, kw.get(k, getattr(self, k)))
        return o


class Unit:
    """What the host issues in one call: a collective, or a p2p call (one batch_isend_irecv, or
    one isend/irecv pair in --p2p single mode)."""

    __slots__ = ("kind", "ops")

    def __init__(self, kind: str, ops: list[Op]) -> None:
        self.kind, self.ops = kind, ops


class Model:
    def __init__(self, topo: Topology, micro: int, layers: int, p2p_mode: str) -> None:
        self.topo, self.micro, self.layers, self.p2p_mode = topo, micro, layers, p2p_mode
        self._cache: dict[tuple[int, bool], list[Unit]] = {}

    def bucket_numels(self, stage: int) -> list[int]:
        """Megatron grad buckets: ~40M params, padded to a multiple of dp*128; the last one smaller."""
        dp = self.topo.dp
        per_layer = 12 * HIDDEN * HIDDEN // self.topo.tp
        params = per_layer * self.layers + (VOCAB // self.topo.tp * HIDDEN if stage in (0, self.topo.pp - 1) else 0)
        pad = dp * 128
        out, left = [], params
        while left > 0:
            n = min(left, 40_000_000)
            out.append((n + pad - 1) // pad * pad)
            left -= n
        return out

    def step(self, stage: int, log_step: bool) -> list[Unit]:
        key = (stage, log_step)
        if key not in self._cache:
            self._cache[key] = self._build(stage, log_step)
        return self._cache[key]

    def _p2p(self, call: str, variant: str, sends: list[tuple[int, str]], recvs: list[tuple[int, str]]) -> Unit:
        shape = [[SEQ_LEN // self.topo.tp, MICRO_BATCH, HIDDEN]]
        ops = []
        # Megatron _batched_p2p_ops order: send_prev, recv_prev, send_next, recv_next
        order = sorted([(peer, 0, tag) for peer, tag in sends] + [(peer, 1, tag) for peer, tag in recvs],
                       key=lambda x: (x[0], x[1]))
        single = self.p2p_mode == "single"
        for peer, is_recv, tag in order:
            name = "recv" if is_recv else "send"
            suffix = ("recv" if is_recv else "send") if single else ("irecv" if is_recv else "isend")
            ops.append(Op("pp", name, f"{call}_{variant}_{suffix}", shape, peer=peer, tag=tag,
                          dur=(0.3, 45.0)))
        if single:
            return Unit("p2p_single", ops)
        ops.append(Op("pp", "coalesced", f"{call}_{variant}_end", [], dur=(0.3, 45.0)))
        return Unit("p2p_batch", ops)

    def _build(self, stage: int, log_step: bool) -> list[Unit]:
        tp, P, M = self.topo.tp, self.topo.pp, self.micro
        first, last = stage == 0, stage == P - 1
        full = [SEQ_LEN, MICRO_BATCH, HIDDEN]
        shard = [SEQ_LEN // tp, MICRO_BATCH, HIDDEN]
        units: list[Unit] = []

        def coll(pg, name, site, ins, outs=None, dtype="BFloat16", dur=(0.2, 1.2)):
            units.append(Unit("coll", [Op(pg, name, site, ins, dtype, outs, None, dur=dur)]))

        def ag(site):
            coll("tp", "_all_gather_base", site, [shard], [full])

        def rs(site):
            coll("tp", "_reduce_scatter_base", site, [full], [shard])

        def forward(phase):
            if first:
                rs("emb_rs")
            for _ in range(self.layers):
                ag(f"att_ag_{phase}")
                rs(f"att_rs_{phase}")
                ag(f"mlp_ag_{phase}")
                rs(f"mlp_rs_{phase}")
            if last:
                ag("out_ag")
                for tag in ("max", "pred", "sum"):
                    coll("tp", "all_reduce", "ce_" + tag, [[SEQ_LEN, MICRO_BATCH]], dtype="Float", dur=(0.02, 0.2))

        def backward(phase):
            if last:
                ag("out_bwd_ag")
                rs("out_bwd_rs")
            for _ in range(self.layers):
                for mod in ("mlp", "att"):
                    ag(f"{mod}_bwd_ag_out_{phase}")
                    ag(f"{mod}_bwd_ag_in_{phase}")
                    rs(f"{mod}_bwd_rs_{phase}")
            if first:
                ag("emb_bwd_ag")

        def p2p(call, variant, sends=(), recvs=()):
            sends = [s for s in sends if 0 <= stage + s[0] < P]
            recvs = [r for r in recvs if 0 <= stage + r[0] < P]
            if sends or recvs:
                units.append(self._p2p(call, variant, sends, recvs))

        # Megatron forward_backward_pipelining_without_interleaving (1F1B)
        warmup = min(P - stage - 1, M)
        remaining = M - warmup
        for _ in range(warmup):
            p2p("recv_forward", "a", recvs=[(-1, "F")])
            forward("w")
            p2p("send_forward", "a", sends=[(+1, "F")])
        if remaining:
            p2p("recv_forward", "b", recvs=[(-1, "F")])
        for i in range(remaining):
            forward("s")
            p2p("send_forward_recv_backward", "a", sends=[(+1, "F")], recvs=[(+1, "B")])
            backward("s")
            if i == remaining - 1:
                p2p("send_backward", "a", sends=[(-1, "B")])
            else:
                p2p("send_backward_recv_forward", "a", sends=[(-1, "B")], recvs=[(-1, "F")])
        for _ in range(warmup):
            p2p("recv_backward", "a", recvs=[(+1, "B")])
            backward("c")
            p2p("send_backward", "b", sends=[(-1, "B")])
        # finalize_model_grads, optimizer step, end of step
        buckets = self.bucket_numels(stage)
        dp = self.topo.dp
        for n in buckets:
            coll("dp", "_reduce_scatter_base", "dp_rs", [[n]], [[n // dp]], dtype="Float", dur=(6.0, 14.0))
        ln = 4 * HIDDEN * self.layers + (2 * HIDDEN if last else 0)
        coll("tp", "all_reduce", "ln_ar", [[ln]], dtype="Float", dur=(0.05, 0.3))
        coll("default", "all_reduce", "default_ar", [[1]], dtype="Float", dur=(0.05, 30.0))
        for n in buckets:
            coll("dp", "_all_gather_base", "dp_ag", [[n // dp]], [[n]], dur=(3.0, 8.0))
        if log_step:
            n_timers = 24
            coll("default", "_all_gather_base", "timers_ag", [[n_timers]], [[self.topo.world * n_timers]],
                 dtype="Float", dur=(0.1, 2.0))
            coll("default", "all_reduce_barrier", "barrier", [[1]], dtype="Float", dur=(0.05, 5.0))
        return units

    def counts(self, stage: int, log_step: bool) -> dict:
        """Per PG kind: collectives (seq ids), p2p seq ids and op ids one step adds; FR entries."""
        c = {"coll": defaultdict(int), "p2p": defaultdict(int), "op": defaultdict(int), "entries": 0}
        for u in self.step(stage, log_step):
            pg = u.ops[0].pg
            if u.kind == "coll":
                c["coll"][pg] += 1
                c["op"][pg] += 1
            elif u.kind == "p2p_batch":
                c["p2p"][pg] += 1
                c["op"][pg] += len(u.ops) - 1
            else:
                c["p2p"][pg] += len(u.ops)
                c["op"][pg] += len(u.ops)
            c["entries"] += len(u.ops)
        return c


def _is_log(step: int) -> bool:
    return step % LOG_INTERVAL == 0


# ---------------------------------------------------------------------------------------------
# the last step, across all ranks


class Job:
    def __init__(self, world, tp, pp, micro, layers, p2p_mode, fault, culprit, final_step, seed, record_jitter,
                 fault_group="tp"):
        self.topo = Topology(world, tp, pp)
        if fault_group not in FAULT_GROUPS or (fault_group == "dp" and fault in ("desync", "size_mismatch")):
            raise SystemExit(f"--fault-group {fault_group} is not available for --fault {fault}")
        self.fault_group = fault_group
        self.model = Model(self.topo, micro, layers, p2p_mode)
        self.fault, self.seed, self.final_step, self.record_jitter = fault, seed, final_step, record_jitter
        if _is_log(final_step):
            raise SystemExit(f"--step {final_step} is a logging step (multiple of {LOG_INTERVAL}); pick another")
        if culprit is None:
            culprit = random.Random(seed).randrange(1, world) if world > 1 else 0
        if not 0 <= culprit < world:
            raise SystemExit(f"--culprit {culprit} is not a rank of a {world}-rank job")
        self.culprit = culprit
        self.n_entries = 0
        self.stall_offset_ns = 930_000_000  # when in the last step the job stalls (approx.)
        self.meta: dict = {"fault": fault, "world": world, "tp": tp, "pp": pp, "dp": self.topo.dp,
                           "final_step": final_step}
        self._fault_unit = self._pick_fault_unit()

    # which unit of the culprit's last step the fault is about
    def _pick_fault_unit(self) -> int | None:
        if self.fault == "none":
            return None
        stage = self.topo.coords(self.culprit)[0]
        units = self.model.step(stage, False)
        kind = "tp" if self.fault_group == "tp_mid" else self.fault_group
        colls = [i for i, u in enumerate(units) if u.kind == "coll" and u.ops[0].pg == kind]
        if kind == "dp":
            idx = colls[0]  # the first gradient reduce-scatter of finalize_model_grads
        elif self.fault in ("missing_rank", "not_completed") and self.fault_group == "tp":
            idx = [i for i in colls if units[i].ops[0].name == "all_reduce"][-1]
        else:  # mid-step, a steady-state forward: attention output reduce-scatter / qkv all-gather
            site = "att_rs_" if self.fault == "desync" else "att_ag_"
            cands = [i for i in colls if units[i].ops[0].site.startswith(site)]
            idx = cands[len(cands) // 2]
        op = units[idx].ops[0]
        seq_before = sum(1 for u in units[:idx] if u.kind == "coll" and u.ops[0].pg == kind)
        name, members = self.topo.groups(self.culprit)[kind]
        before = self.final_step - 1
        n_log = before // LOG_INTERVAL
        reg, log = self.model.counts(stage, False), self.model.counts(stage, True)
        seq = (before - n_log) * reg["coll"][kind] + n_log * log["coll"][kind] + seq_before + 1
        self.meta.update(culprit=self.culprit, pg_name=name, pg_desc=kind, group_ranks=members,
                         op="nccl:" + op.name, site=op.site, collective_seq_id=seq)
        return idx

    def final_units(self, r: int) -> list[Unit]:
        units = list(self.model.step(self.topo.coords(r)[0], False))
        if self.fault in ("none", "not_completed") or r != self.culprit:
            return units
        i = self._fault_unit
        if self.fault == "missing_rank":
            return units[:i]  # stuck in host code before issuing it
        op = units[i].ops[0]
        if self.fault == "desync":
            bad = op.copy(name="all_reduce", site="att_ar_nosp", in_sizes=[list(op.in_sizes[0])],
                          out_sizes=[list(op.in_sizes[0])])
        else:
            seq = SEQ_LEN - 128
            bad = op.copy(in_sizes=[[seq // self.topo.tp, MICRO_BATCH, HIDDEN]],
                          out_sizes=[[seq, MICRO_BATCH, HIDDEN]])
        units[i] = Unit("coll", [bad])
        return units

    def simulate(self) -> dict[int, dict]:
        """Run the last step on all ranks. A collective completes once every member issued it, a p2p
        op once its peer posted the matching op. The host blocks in a collective and in a p2p call
        that receives (batched calls wait for all their ops), not in a lone isend.
        Returns rank -> {"issued": n units issued, "incomplete": {unit index: set of op indexes}}."""
        topo = self.topo
        units = {r: self.final_units(r) for r in range(topo.world)}
        need: dict = {}
        keys: dict[int, list[list[tuple]]] = {}
        hung_key = None
        for r in range(topo.world):
            seq = defaultdict(int)
            p2p_count = defaultdict(int)
            stage = topo.coords(r)[0]
            names = topo.group_names(r)
            per_unit = []
            for i, u in enumerate(units[r]):
                ks = []
                for op in u.ops:
                    if op.name == "coalesced":
                        ks.append(None)
                    elif u.kind == "coll":
                        name, size = names[op.pg]
                        seq[op.pg] += 1
                        k = ("c", name, seq[op.pg])
                        need[k] = size
                        ks.append(k)
                    else:
                        peer = topo.rank(stage + op.peer, *topo.coords(r)[1:])
                        src, dst = (peer, r) if op.name == "recv" else (r, peer)
                        p2p_count[(src, dst, op.tag)] += 1
                        k = ("p", src, dst, op.tag, p2p_count[(src, dst, op.tag)])
                        need[k] = 2
                        ks.append(k)
                if self.fault in ("desync", "size_mismatch", "not_completed") and r == self.culprit \
                        and i == self._fault_unit:
                    hung_key = ks[0]
                per_unit.append(ks)
            keys[r] = per_unit
        if hung_key is not None:
            need[hung_key] = float("inf")  # mismatched NCCL collective: never completes
        arrived: dict = defaultdict(int)
        done: set = set()
        waiters: dict = defaultdict(list)
        ptr = [0] * topo.world
        issued = [0] * topo.world  # units issued so far (ptr or ptr + 1)
        queue = deque(range(topo.world))
        while queue:
            r = queue.popleft()
            while ptr[r] < len(units[r]):
                i = ptr[r]
                u = units[r][i]
                ks = [k for k in keys[r][i] if k is not None]
                if issued[r] <= i:
                    issued[r] = i + 1
                    for k in ks:
                        arrived[k] += 1
                        if arrived[k] >= need[k]:
                            done.add(k)
                            for w in waiters.pop(k, ()):
                                queue.append(w)
                blocking = u.kind != "p2p_single" or any(op.name == "recv" for op in u.ops)
                pending = [k for k in ks if k not in done]
                if blocking and pending:
                    waiters[pending[0]].append(r)
                    break
                ptr[r] += 1
        out = {}
        for r in range(topo.world):
            incomplete = {}
            for i in range(issued[r]):
                bad = {j for j, k in enumerate(keys[r][i]) if k is not None and k not in done}
                if bad:
                    incomplete[i] = bad
            out[r] = {"issued": issued[r], "incomplete": incomplete}
        return out


# ---------------------------------------------------------------------------------------------
# per-rank dump (runs in worker processes)

_JOB: Job | None = None
_SIM: dict | None = None
# the shape of the files (not of the job): see --frames, --extra-frames, --unshared, --format
_SHAPE: dict = {"frames": True, "extra_frames": 0, "unshared": False, "format": "pickle"}
_FRAMES: dict[str, list[dict]] = {}
_FRAME_DICTS: dict[tuple, dict] = {}
_STR: dict[str, str] = {}


def _s(x: str) -> str:
    """One str object per distinct string, so pickle memoizes it like torch's pickler does."""
    return _STR.setdefault(x, x)


def _fresh(x: str) -> str:
    """An equal str that is a new object: pickle writes it again instead of a BINGET."""
    return (x + ".")[:-1]


def _frames(site: str) -> list[dict]:
    if _SHAPE["unshared"]:  # every frame and string written out in full, as a non-memoizing writer does
        return [{"name": _fresh(f["name"]), "filename": _fresh(f["filename"]), "line": f["line"]}
                for f in _shared_frames(site)]
    return _shared_frames(site)


def _shared_frames(site: str) -> list[dict]:
    if site not in _FRAMES:
        shared = _FRAME_DICTS
        stack = []
        extra = [(f"wrapper_{i}", f"/workspace/launcher/layer_{i % 7}.py", 20 + i)
                 for i in range(_SHAPE["extra_frames"])]
        for name, filename, line in SITES[site][:-1] + extra + SITES[site][-1:]:
            key = (name, filename, line)
            if key not in shared:
                shared[key] = {"name": _s(name), "filename": _s(filename), "line": line}
            stack.append(shared[key])
        _FRAMES[site] = stack
    return _FRAMES[site]


def _profiling_name(op: Op, groups: dict, r: int, topo: Topology) -> str:
    if op.name in ("send", "recv"):
        members = groups["pp"][1]
        me = members.index(r)
        peer = me + op.peer
        return _s(f"nccl:send {me}->{peer}" if op.name == "send" else f"nccl:recv {me}<-{peer}")
    return _s("nccl:" + op.name)


def rank_dump(r: int) -> tuple[dict, int]:
    """(dump dict, dump time ns) of one rank."""
    job, sim = _JOB, _SIM
    assert job is not None and sim is not None
    topo, model = job.topo, job.model
    stage = topo.coords(r)[0]
    groups = topo.groups(r)
    rng = random.Random(job.seed * 1_000_003 + r)
    n = job.n_entries
    final = job.final_step
    final_units = job.final_units(r)
    issued = sim[r]["issued"]
    incomplete = sim[r]["incomplete"]
    final_entries = sum(len(u.ops) for u in final_units[:issued])

    # first step of the window: walk back until the buffer is full
    first, total = final, final_entries
    while total < n:
        first -= 1
        total += model.counts(stage, _is_log(first))["entries"]

    # per-PG counters at the start of step `first` (steps 1 .. first-1 ran before)
    n_log = (first - 1) // LOG_INTERVAL
    n_reg = (first - 1) - n_log
    reg, log = model.counts(stage, False), model.counts(stage, True)
    coll = {k: 3 if k == "default" else 0 for k in PG_ID}  # init-time collectives (barriers)
    p2p = {k: 0 for k in PG_ID}
    opid = dict(coll)
    for k in PG_ID:
        coll[k] += n_reg * reg["coll"][k] + n_log * log["coll"][k]
        p2p[k] += n_reg * reg["p2p"][k] + n_log * log["p2p"][k]
        opid[k] += n_reg * reg["op"][k] + n_log * log["op"][k]
    # record ids count every FR record of the process, incl. PGs destroyed since (checkpoint loading
    # subgroups): a small per-rank offset on top of the stage's own history
    jitter = random.Random(job.seed * 7919 + r).randrange(job.record_jitter + 1) if job.record_jitter else 0
    record = INIT_OPS + jitter + n_reg * reg["entries"] + n_log * log["entries"]

    thread_id = _s(str(139_600_000_000_000 + random.Random(r * 31 + job.seed).randrange(10 ** 12)))
    thread_name = _s("python3")
    skew = rng.randrange(-2_000_000, 2_000_000)  # clock skew between hosts
    wd_phase = rng.randrange(WATCHDOG_NS)
    pg_tuple = {k: (groups[k][0], PG_DESC[k]) for k in PG_ID}
    status = {k: [-1, -1, -1] for k in PG_ID}  # last enqueued / started / completed
    entries: list[dict] = []
    s_completed, s_started, s_scheduled = "completed", "started", "scheduled"
    stuck_ns = None

    def tick(t: int) -> int:  # the watchdog notices at its next loop
        return t + (wd_phase - t) % WATCHDOG_NS

    for step in range(first, final + 1):
        is_final = step == final
        units = final_units[:issued] if is_final else model.step(stage, _is_log(step))
        n_units = max(len(model.step(stage, False)), 1)
        t_step = JOB_START_NS + step * STEP_NS + skew
        for i, u in enumerate(units):
            t_unit = t_step + (i * 930_000_000) // n_units + rng.randrange(150_000)
            bad = incomplete.get(i, ()) if is_final else ()
            pg = u.ops[0].pg
            if u.kind == "coll":
                coll[pg] += 1
            elif u.kind == "p2p_batch":
                p2p[pg] += 1
            for j, op in enumerate(u.ops):
                if u.kind == "p2p_single":
                    p2p[pg] += 1
                if op.name != "coalesced":
                    opid[pg] += 1
                created = t_unit + j * 9_000
                in_batch = u.kind == "p2p_batch" and op.name != "coalesced"
                if u.kind == "p2p_batch" and op.name == "coalesced":
                    unit_done = not bad
                else:
                    unit_done = j not in bad
                e = {"frames": list(_frames(op.site)), "record_id": record, "pg_id": PG_ID[pg],
                     "process_group": tuple(pg_tuple[pg]),
                     "thread_name": thread_name, "thread_id": thread_id, "collective_seq_id": coll[pg],
                     "p2p_seq_id": p2p[pg], "op_id": opid[pg], "profiling_name": _profiling_name(op, groups, r, topo),
                     "time_created_ns": created}
                seq_key = p2p[pg] if u.kind != "coll" else coll[pg]
                if in_batch:
                    state, t_start, t_end, retired, dur = s_scheduled, None, None, False, None
                elif unit_done:
                    launch = created + rng.randrange(20_000, 400_000)
                    dur = round(rng.uniform(*op.dur), 6)
                    state, retired = s_completed, True
                    t_start = tick(launch)
                    t_end = max(tick(launch + int(dur * 1e6)), t_start)
                else:
                    state, retired, dur, t_end = s_started, False, None, None
                    t_start = tick(created + rng.randrange(20_000, 400_000))
                    stuck_ns = created if stuck_ns is None else min(stuck_ns, created)
                if dur is not None:
                    e["duration_ms"] = dur
                e["input_sizes"] = [list(x) for x in op.in_sizes]
                e["input_dtypes"] = [op.in_dtype] * len(op.in_sizes)
                e["output_sizes"] = [list(x) for x in op.out_sizes]
                e["output_dtypes"] = [op.out_dtype] * len(op.out_sizes)
                e["state"] = state
                e["time_discovered_started_ns"] = t_start
                e["time_discovered_completed_ns"] = t_end
                e["retired"] = retired
                e["timeout_ms"] = TIMEOUT_MS
                e["is_p2p"] = u.kind != "coll"
                if not _SHAPE["frames"]:
                    del e["frames"]
                if _SHAPE["unshared"]:
                    for k in ("profiling_name", "state", "thread_name", "thread_id"):
                        e[k] = _fresh(e[k])
                    e["process_group"] = (_fresh(e["process_group"][0]), _fresh(e["process_group"][1]))
                entries.append(e)
                record += 1
                if not in_batch:  # works (collectives, single p2p, coalesced ends) update pg_status
                    st = status[pg]
                    st[0] = seq_key
                    if state != s_scheduled:
                        st[1] = seq_key
                    if state == s_completed:
                        st[2] = seq_key
    if job.fault == "none":
        # a healthy job dumped on demand, mid-flight: the last dp all-gather is running, the closing
        # default-PG all_reduce waits behind it
        tail = [e for e in entries if not (e["is_p2p"] and e["state"] == s_scheduled)][-2:]
        for e, state in zip(tail, (s_started, s_scheduled)):
            e["state"], e["retired"], e["time_discovered_completed_ns"] = state, False, None
            e.pop("duration_ms", None)
            if state == s_scheduled:
                e["time_discovered_started_ns"] = None
        for e, state in zip(tail, (s_started, s_scheduled)):
            kind = {v: k for k, v in PG_ID.items()}[e["pg_id"]]
            st = status[kind]
            seq_key = e["collective_seq_id"]
            st[2] = min(st[2], seq_key - 1)
            if state == s_scheduled:
                st[1] = min(st[1], seq_key - 1)
        dump_ns = entries[-1]["time_created_ns"] + rng.randrange(50_000_000, 400_000_000)
    else:
        base = JOB_START_NS + final * STEP_NS + job.stall_offset_ns
        dump_ns = base + TIMEOUT_MS * 1_000_000 + rng.randrange(50_000_000, 1_500_000_000)
    entries = entries[-n:]
    pg_config = {}
    for kind in PG_ID:  # creation order
        name, members = groups[kind]
        pg_config[name] = {"name": name, "desc": PG_DESC[kind], "ranks": "[" + ", ".join(map(str, members)) + "]"}
    pg_status = {str(PG_ID[k]): {"last_enqueued_collective": v[0], "last_started_collective": v[1],
                                 "last_completed_collective": v[2]} for k, v in status.items()}
    dump = {"version": VERSION, "pg_config": pg_config, "comm_lib_version": COMM_LIB_VERSION,
            "pg_status": pg_status, "entries": entries}
    return dump, dump_ns


def _write(args: tuple) -> int:
    r, out, prefix = args
    dump, dump_ns = rank_dump(r)
    if _SHAPE["format"] == "json":  # what the JSON handlers write: no frames, lists, 0 for "not yet", str counters
        for e in dump["entries"]:
            e.pop("frames", None)
            e["process_group"] = list(e["process_group"])
            for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                e[k] = e[k] or 0
        dump["pg_status"] = {k: {n: str(v) for n, v in st.items()} for k, st in dump["pg_status"].items()}
        dump["nccl_comm_state"] = {}
        data = json.dumps(dump).encode()
    else:
        data = pickle.dumps(dump, protocol=2)
    path = os.path.join(out, f"{prefix}{r}")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.utime(tmp, ns=(dump_ns, dump_ns))
    os.replace(tmp, path)
    return len(data)


def generate(ranks: int, entries: int, out: str, tp: int = 8, pp: int = 4, fault: str = "none",
             prefix: str = DEFAULT_PREFIX, workers: int | None = None, seed: int = 0, culprit: int | None = None,
             micro_batches: int = 8, layers: int = 2, p2p: str = "batched", step: int = 50_123,
             record_jitter: int = 12, quiet: bool = True, frames: bool = True, extra_frames: int = 0,
             unshared: bool = False, fmt: str = "pickle", fault_group: str = "tp") -> dict:
    """Write the dump directory; returns a description: {"bytes", "seconds", "culprit", ...}."""
    global _JOB, _SIM
    _SHAPE.update(frames=frames, extra_frames=extra_frames, unshared=unshared, format=fmt)
    _FRAMES.clear()
    _FRAME_DICTS.clear()
    if fault not in FAULTS:
        raise SystemExit(f"--fault must be one of {FAULTS}")
    t0 = time.monotonic()
    job = Job(ranks, tp, pp, micro_batches, layers, p2p, fault, culprit, step, seed, record_jitter, fault_group)
    job.n_entries = entries
    sim = job.simulate()
    stuck = sum(1 for s in sim.values() if s["incomplete"])
    if fault == "none":
        full = all(s["issued"] == len(job.final_units(r)) for r, s in sim.items())
        assert full and not stuck, "healthy schedule did not run to the end: generator bug"
    job.meta["ranks_in_flight"] = stuck
    _JOB, _SIM = job, sim
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):  # stale files from a bigger run would be read as extra ranks
        if name.startswith(prefix) and name[len(prefix):].split(".")[0].isdigit():
            if int(name[len(prefix):].split(".")[0]) >= ranks or name.endswith(".tmp"):
                os.unlink(os.path.join(out, name))
    tasks = [(r, out, prefix) for r in range(ranks)]
    workers = max(1, workers or os.cpu_count() or 1)
    total = 0
    if workers == 1:
        for t in tasks:
            total += _write(t)
    else:
        with get_context("fork").Pool(workers) as pool:
            for size in pool.imap_unordered(_write, tasks, chunksize=max(1, min(16, ranks // (workers * 4)))):
                total += size
    meta = dict(job.meta)
    meta.update(bytes=total, seconds=round(time.monotonic() - t0, 2), ranks=ranks, entries=entries, seed=seed,
                prefix=prefix, p2p=p2p, micro_batches=micro_batches, layers_per_stage=layers, frames=frames,
                extra_frames=extra_frames, unshared=unshared, format=fmt)
    if fault == "none":
        meta["culprit"] = None
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64, help="world size (multiple of tp*pp)")
    ap.add_argument("--entries", type=int, default=2000, help="FR ring buffer entries per rank")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--out", required=True, help="dump directory (created; files of other ranks removed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--fault-group", choices=FAULT_GROUPS, default="tp",
                    help="group of missing_rank / not_completed: tp (inside a pod) or dp (across pods)")
    ap.add_argument("--culprit", type=int, default=None, help="rank the fault is injected on (default: from seed)")
    ap.add_argument("--workers", type=int, default=None, help="processes writing ranks (default: all cores)")
    ap.add_argument("--prefix", default=DEFAULT_PREFIX)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--layers-per-stage", type=int, default=2)
    ap.add_argument("--p2p", choices=("batched", "single"), default="batched",
                    help="pipeline p2p as batch_isend_irecv (Megatron's default) or lone isend/irecv")
    ap.add_argument("--step", type=int, default=50_123, help="training step the dump is taken at")
    ap.add_argument("--record-jitter", type=int, default=12,
                    help="max per-rank extra record_id offset (0: same offsets on every rank of a stage)")
    ap.add_argument("--meta-out", default=None, help="also write the fault description (JSON) to this file")
    ap.add_argument("--no-frames", action="store_true", help="no stack traces (includeStackTraces=False)")
    ap.add_argument("--extra-frames", type=int, default=0,
                    help="N more frames per stack, between the job's frames and <module> (deeper launchers)")
    ap.add_argument("--unshared", action="store_true",
                    help="no shared strings or frame dicts: the pickle writes every one in full (no BINGET)")
    ap.add_argument("--format", choices=("pickle", "json"), default="pickle",
                    help="json: what the JSON handlers write (no frames, str pg_status counters)")
    args = ap.parse_args(argv)
    meta = generate(args.ranks, args.entries, args.out, args.tp, args.pp, args.fault, args.prefix, args.workers,
                    args.seed, args.culprit, args.micro_batches, args.layers_per_stage, args.p2p, args.step,
                    args.record_jitter, frames=not args.no_frames, extra_frames=args.extra_frames,
                    unshared=args.unshared, fmt=args.format, fault_group=args.fault_group)
    print(f"{args.ranks} ranks x {args.entries} entries ({args.fault}) -> {args.out}: "
          f"{meta['bytes'] / 1e6:.1f} MB total, {meta['bytes'] / args.ranks / 1e6:.2f} MB per rank, "
          f"{meta['seconds']:.1f} s")
    print(json.dumps({k: v for k, v in meta.items() if k != "group_ranks"}))
    if args.meta_out:
        with open(args.meta_out, "w") as f:
            json.dump(meta, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
