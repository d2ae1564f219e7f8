"""Megatron-like 64-rank dumps from benchmarks/gen_dumps.py, split into pods the way the chart deploys
frexport: 8 pods of 8 ranks, tensor-parallel groups inside a pod, data- and pipeline-parallel groups
across pods (rank = stage * 16 + d * 8 + t with tp=8, pp=4, dp=2)."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

from frexport.decode.read import decode_file
from frexport.model.dump import RankDump
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gen_dumps  # noqa: E402

WORLD, TP, PP, PODS = 64, 8, 4, 8
PREFIX = gen_dumps.DEFAULT_PREFIX


def pod_of(rank: int) -> int:
    return rank // (WORLD // PODS)


def pod_ranks(pod: int) -> range:
    per = WORLD // PODS
    return range(pod * per, (pod + 1) * per)


STEP = 50_123


def generate(out: Path, fault: str = "none", group: str = "tp_mid", culprit: int | None = None,
             entries: int = 120, dumped_at_ns: int | None = None) -> dict:
    """Write one dump per rank into `out`; returns gen_dumps' description of the fault. `dumped_at_ns`
    places the job in time so that its dumps are written about then (a hang's when the 600 s watchdog
    fires), for tests whose rules compare times with the clock."""
    if dumped_at_ns is not None:
        before = gen_dumps.STEP_NS if fault == "none" else 930_000_000 + gen_dumps.TIMEOUT_MS * 1_000_000
        gen_dumps.JOB_START_NS = dumped_at_ns - STEP * gen_dumps.STEP_NS - before - 2_000_000_000
    # 4 micro-batches of 1 layer per stage: a short step keeps generation fast; the schedule is still 1F1B
    return gen_dumps.generate(WORLD, entries, str(out), TP, PP, fault, workers=1, culprit=culprit,
                              fault_group=group, micro_batches=4, layers=1, step=STEP)


def split(out: Path, dest: Path, fmt: str = "pickle") -> list[Path]:
    """Move each pod's dumps into its own directory (dest/pod-<k>): what each sidecar can see. With
    fmt="json" they are rewritten as PyTorch's JSON dumps (same content, same mtime): a sidecar decodes
    those in-process, where a pickle takes a sandboxed process each (slow for 32 sidecars on 2 cores)."""
    dirs = []
    for pod in range(PODS):
        d = dest / f"pod-{pod}"
        d.mkdir(parents=True, exist_ok=True)
        for r in pod_ranks(pod):
            src = out / f"{PREFIX}{r}"
            if fmt == "json":
                st = src.stat()
                target = d / f"{PREFIX}{r}.json"
                target.write_text(json.dumps(pickle.loads(src.read_bytes())))
                os.utime(target, ns=(st.st_mtime_ns, st.st_mtime_ns))
                src.unlink()
            else:
                src.rename(d / f"{PREFIX}{r}")
        dirs.append(d)
    return dirs


def load(out: Path) -> dict[int, RankDump]:
    return {r: decode_file(str(out / f"{PREFIX}{r}"), rank=r) for r in range(WORLD)}
