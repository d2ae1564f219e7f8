"""Run a real torch scenario under torchrun and capture every rank's Flight Recorder while it hangs.

    python tests/realjobs/capture.py SCENARIO OUTDIR      # one scenario
    python tests/realjobs/capture.py --all                # every scenario into tests/fixtures/real/

Each rank serves its recorder on a unix socket (see _rank_server.py). The capture polls all ranks
every 0.5 s, keeps each rank's latest answers, and stops once nothing has changed for
--stable seconds (the job is hung, or held at its end), or when the job exits. It saves, per
rank, the pickle dump with stack frames (trace_<rank>), the JSON dump (json/trace_<rank>.json)
and the Python stacks (stacks/rank_<rank>.txt), then kills the whole job.

The hooked_* scenarios (torch 2.15, `"recorders"` in SETTINGS) put groups on an out-of-tree backend that
torch records with its FlightRecorderHook into a recorder of its own. Each such recorder is saved as
`frexport snapshot` saves a rank's other recorders, under recorder-<name>/ (trace_<rank>,
json/trace_<rank>.json); gloo's stays at the top, and only where it holds entries. Torch's own dump file
of the hooked recorder (the `fr_dump_file?backend=<name>` handler, `_dump_fr_trace_file`, written to
<TORCH_FR_DUMP_TEMP_FILE><rank>) goes to torch_dump/nccl_trace_rank_<rank>.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from frexport.sources.http_client import PeerError, Target, request  # noqa: E402
from tests.support.proctree import kill_tree  # noqa: E402

SCENARIOS = ["healthy", "extra_allreduce", "stuck_before_collective", "size_mismatch", "dtype_mismatch",
             "slow_rank", "collective_type_mismatch", "cross_group_order", "all_to_all_split_mismatch",
             "crashed_rank", "healthy_midrun", "killed_in_allreduce", "died_between_collectives",
             "coalesced_extra_tensor", "straggler_2d", "straggler_2d_midrun", "p2p_wrong_peer",
             "two_looks_hung", "two_looks_running", "killed_in_allreduce_8", "two_looks_p2p", "uneven_exit",
             "uneven_exit_stale", "pp_dp_tp_stuck", "pp_dp_tp_stuck_24"]
HOOKED = ["hooked_stuck_tp", "hooked_mixed_wait_hooked", "hooked_mixed_wait_gloo", "hooked_split_group",
          "hooked_size_mismatch", "hooked_op_mismatch"]
# Scenarios that are not 4-rank hangs: world size, extra torchrun flags, recorder size, and
# `snapshot_after` (take one poll round that many seconds after every rank answered, while the job runs),
# `limit` (seconds the capture waits for the job at most: 16 ranks on 2 cores take long to start).
SETTINGS: dict[str, dict] = {
    "cross_group_order": {"world": 8},
    # torchrun would SIGTERM the survivors 0.1 s after rank 3 dies; they must live on to be captured
    "crashed_rank": {"torchrun_args": ["--monitor-interval=3600"]},
    "healthy_midrun": {"world": 8, "snapshot_after": 6.0, "buffer": 24},  # a small ring: wrapped buffers
    "killed_in_allreduce": {"torchrun_args": ["--monitor-interval=3600"]},
    # 8 members: the dead rank's ring neighbours are its own, so the ring decides without stacks
    "killed_in_allreduce_8": {"script": "killed_in_allreduce", "world": 8, "env": {"KILL_AFTER_S": "5", "LATE_S": "8"},
                              "torchrun_args": ["--monitor-interval=3600"]},
    "died_between_collectives": {"torchrun_args": ["--monitor-interval=3600"]},
    "coalesced_extra_tensor": {"torchrun_args": ["--monitor-interval=3600"]},
    # the same job, one poll round 4 s in: ranks caught inside collectives waiting for the late rank
    "straggler_2d_midrun": {"script": "straggler_2d", "snapshot_after": 4.0},
    "p2p_wrong_peer": {"pyspy": True},  # py-spy's locals name each send/recv's peer
    # `frexport snapshot --rounds 2 --gap 6` instead of the capture's own files: look_1/, look_2/, looks.json
    "two_looks_hung": {"script": "stuck_before_collective", "looks": 6.0},
    "two_looks_running": {"script": "straggler_2d", "snapshot_after": 2.0, "looks": 6.0},
    "two_looks_p2p": {"script": "p2p_wrong_peer", "looks": 6.0},
    # rank 3 exits with status 0 when its data runs out: the survivors must live on to be captured
    "uneven_exit": {"world": 8, "buffer": 100, "torchrun_args": ["--monitor-interval=3600"]},
    # the same, rank 3 answering no more after step 3 (its last dump from before it left: stale)
    "uneven_exit_stale": {"script": "uneven_exit", "world": 8, "buffer": 100, "env": {"STOP_SERVING_AFTER": "3"},
                          "torchrun_args": ["--monitor-interval=3600"]},
    "pp_dp_tp_stuck": {"world": 16, "buffer": 100, "pyspy": True, "limit": 400},
    "pp_dp_tp_stuck_24": {"script": "pp_dp_tp_stuck", "world": 24, "env": {"DP": "3"}, "buffer": 100, "pyspy": True,
                          "limit": 600},
}
# Hooked scenarios: the torch 2.15 environment runs them (an out-of-tree backend gets the hook from 2.15),
# `recorders` are the hooked recorders dumped beside gloo's. A small ring keeps the fixtures small.
_H = {"torch": ".torch/2.15.0", "recorders": ["asyncstore"], "backend": "asyncstore", "buffer": 200}
SETTINGS.update({
    "hooked_stuck_tp": {**_H, "world": 8},
    "hooked_mixed_wait_hooked": {**_H, "script": "hooked_mixed", "env": {"STUCK_BEFORE": "hooked"}},
    "hooked_mixed_wait_gloo": {**_H, "script": "hooked_mixed", "env": {"STUCK_BEFORE": "gloo"}},
    "hooked_split_group": {**_H, "backend": "gloo+asyncstore"},
    "hooked_size_mismatch": _H,
    "hooked_op_mismatch": _H,
})
TORCH_DUMP_PREFIX = "nccl_trace_rank_"  # torch's default name for <TORCH_FR_DUMP_TEMP_FILE> (frexport knows it)
DESCRIPTIONS = {
    "healthy": "default group plus tp and dp subgroups, async ops and p2p; every collective completes. No culprit.",
    "extra_allreduce": "rank 0 issues one extra all_reduce on the default group (the FR tutorial's crash.py); it "
                       "hangs in it. Culprit: rank 0.",
    "stuck_before_collective": "rank 2 sleeps forever before its 4th all_reduce; ranks 0, 1, 3 block in it. "
                               "Culprit: rank 2.",
    "size_mismatch": "rank 3 broadcasts into a 32-element buffer where its peers use 16 (completes silently). "
                     "Culprit: rank 3.",
    "dtype_mismatch": "rank 1 all_reduces bfloat16 where its peers use float16 (completes silently). "
                      "Culprit: rank 1.",
    "slow_rank": "rank 1 sleeps 0.3 s before each of 12 all_reduces; all complete. Straggler: rank 1.",
    "collective_type_mismatch": "rank 1 calls broadcast where its peers call all_reduce; every rank hangs. "
                                "Culprit: rank 1.",
    "cross_group_order": "8 ranks, tp groups {0-3} and {4-7}; each step all_reduces on the default group then on tp, "
                         "but at step 2 rank 6 issues the tp call first: a cross-group deadlock. Culprit: rank 6.",
    "all_to_all_split_mismatch": "uneven but consistent all_to_all_single splits; at step 3 rank 1's input disagrees "
                                 "with its split sizes, gloo fails it at once, ranks 0, 2, 3 wait. Culprit: rank 1.",
    "crashed_rank": "rank 3 raises an uncaught exception 3 s into step 25 (its last dump ends with step 24's "
                    "all_reduce); its ring neighbours fail, the others wait. Culprit: rank 3.",
    "healthy_midrun": "8 ranks, ranks 4-7 computing longer per step, snapshot mid-run with some ranks waiting inside "
                      "collectives for peers still computing. No culprit.",
    "killed_in_allreduce": "rank 2 is SIGKILLed inside step 6's all_reduce while its peers wait in it for rank 0; "
                           "its ring neighbours 1 and 3 fail out of it, rank 0 waits. Culprit: rank 2.",
    "killed_in_allreduce_8": "killed_in_allreduce with 8 ranks: rank 2's ring neighbours 1 and 3 fail out, 0 and 4-7 "
                             "wait. Culprit: rank 2, by the ring alone.",
    "died_between_collectives": "rank 3 is SIGKILLed between collectives; its ring neighbours 0 and 2 fail in the "
                                "next all_reduce and exit, then rank 1: the job collapses, every dump is stale. "
                                "Culprit: rank 3 (a suspect: nothing in the dumps times the wait).",
    "coalesced_extra_tensor": "a coalesced all_reduce of gradient buckets; at step 4 rank 1 passes an extra tensor. "
                              "Culprit: rank 1.",
    "straggler_2d": "2x2 tp x dp grid; rank 0 is 0.4 s late to every step, its tp peer 1 inherits the lateness in "
                    "dp. Straggler: rank 0 only.",
    "straggler_2d_midrun": "straggler_2d snapshotted mid-run. Straggler: rank 0 only; no hang.",
    "two_looks_hung": "stuck_before_collective seen by `frexport snapshot --rounds 2 --gap 6`: no rank moves. "
                      "Culprit: rank 2, certain.",
    "two_looks_p2p": "p2p_wrong_peer seen by `frexport snapshot --rounds 2 --gap 6 --stacks` (faulthandler stacks, "
                     "no peers): every rank in the same send/recv in both looks. A certain hang, no culprit.",
    "two_looks_running": "straggler_2d seen mid-run by `frexport snapshot --rounds 2 --gap 6`: every group "
                         "progresses. No hang.",
    "p2p_wrong_peer": "4-stage pipeline; at step 3 stage 2 sends its activations to stage 0 instead of 3: every rank "
                      "blocks in send/recv, which gloo does not record. Culprit: rank 2 (from the stacks).",
    "uneven_exit": "8 ranks, dp {0-3},{4-7}, each step a dp all_reduce then a default-group one; rank 3 runs out "
                   "of data after step 5 and exits 0 (uneven inputs); in step 6 its dp ring neighbours 0 and 2 fail "
                   "out of the dp all_reduce, 1 waits in it, 4-7 wait in the default group. Culprit: rank 3.",
    "uneven_exit_stale": "uneven_exit, rank 3 answering no more after step 3: its last dump is from before it left. "
                         "Culprit: rank 3.",
    "pp_dp_tp_stuck": "16 ranks, pp 2 x dp 2 x tp 4, stage 0's rank r sends to stage 1's r + 8 and receives its "
                      "gradients; at step 3 rank 9 sticks in host code before its tp all_reduce: 8, 10, 11 wait in "
                      "tp, 0-3 in recv (not recorded), 4-7 and 12-15 in dp. Culprit: rank 9.",
    "pp_dp_tp_stuck_24": "pp_dp_tp_stuck with dp 3 (the issue's 24 ranks): rank 13 sticks before its tp all_reduce; "
                         "12, 14, 15 wait in tp, 0-3 in recv, 4-11 and 16-23 in dp. Culprit: rank 13.",
    "hooked_stuck_tp": "8 ranks, every group on asyncstore (async out-of-tree backend, hook-recorded, entries retired "
                       "at issue); tp {0-3},{4-7}, dp {i,i+4}; each step tp all_gather, dp all_reduce, default "
                       "all_reduce. At step 4 rank 5 sticks in its data loader: 4, 6, 7 wait in the tp all_gather. "
                       "Culprit: rank 5 (missing from asyncstore tp all_gather).",
    "hooked_mixed_wait_hooked": "default group on asyncstore, a gloo group of all ranks; each step an asyncstore "
                                "all_reduce then a gloo all_reduce. At step 3 rank 2 sticks before the asyncstore "
                                "all_reduce. Culprit: rank 2 (asyncstore:0).",
    "hooked_mixed_wait_gloo": "the same job; at step 3 rank 2 sticks after the asyncstore all_reduce, before the gloo "
                              "one. Culprit: rank 2 (gloo group 1).",
    "hooked_split_group": "one group `cpu:gloo,privateuseone:asyncstore` (as cpu:gloo,cuda:nccl): a gloo all_reduce of "
                          "CPU metadata, then an asyncstore all_reduce of device tensors per step; at step 3 rank 2 "
                          "sticks between them. Culprit: rank 2 (asyncstore:0).",
    "hooked_size_mismatch": "all on asyncstore; at step 1 rank 3 broadcasts into a 32-element buffer where its peers "
                            "use 16 (completes silently, like NCCL). Culprit: rank 3 (size_mismatch).",
    "hooked_op_mismatch": "all on asyncstore; at step 2 rank 1 calls broadcast where its peers call all_reduce; "
                          "asyncstore never completes it, every rank hangs. Culprit: rank 1 (desync).",
}


def _answers(sock: str, recorders: list[str]) -> dict[str, tuple[bytes, bytes]] | None:
    """One rank's recorders: name -> (JSON, pickle); None unless every one answered. Without hooked
    recorders, gloo's through the handlers' plain names (every torch's worker server has them)."""
    out = {}
    for name in ["gloo", *recorders]:
        query = f"?backend={name}" if recorders else ""
        js, pk = _post(sock, f"fr_trace_json{query}"), _post(sock, f"fr_trace_pickle{query}")
        if not (js and pk):
            return None
        out[name] = (js, pk)
    return out


def _post(sock: str, handler: str, timeout: float = 15.0) -> bytes | None:
    try:
        r = request(Target(unix_path=sock), "POST", f"/handler/{handler}", timeout=timeout)
    except PeerError:
        return None
    return r.body if r.status == 200 else None


def _refuses(sock: str) -> bool:
    """Whether nobody listens on the rank's socket any more: its process is gone (killed)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock)
    except ConnectionRefusedError:
        return True
    except OSError:  # not there yet (a rank still starting), or another trouble: not known to be gone
        return False
    finally:
        s.close()
    return False


def _holds_entries(answers: dict[str, tuple[bytes, bytes]]) -> bool:
    return any(b'"entries"' in js for js, _ in answers.values())


def _stack(sockdir: Path, rank: int) -> bytes | None:
    """One rank's Python stacks; asked twice where the socket is there (a loaded machine answers 16
    ranks slowly: a rank missing from the look reads as a rank that left the job)."""
    sock = sockdir / f"rank-{rank}.sock"
    return _post(str(sock), "dump_traceback") or (_post(str(sock), "dump_traceback", 30) if sock.exists() else None)


def _pyspy(pidfile: Path) -> bytes | None:
    """`py-spy dump --locals` of one rank (its arguments name the peers of send/recv), where py-spy is
    installed (PY_SPY, else on PATH); the capture goes on without it."""
    exe = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if not exe or not pidfile.exists():
        return None
    r = subprocess.run([exe, "dump", "--locals", "--pid", pidfile.read_text().strip()], capture_output=True,
                       timeout=60)
    return r.stdout if r.returncode == 0 else None


def capture(scenario: str, out: Path, stable_s: float = 7.0, limit_s: float = 120.0,
            torch_bin: Path | None = None) -> dict:
    import torch

    settings = SETTINGS.get(scenario, {})
    limit_s = settings.get("limit", limit_s)
    world = settings.get("world", 4)
    snapshot_after = settings.get("snapshot_after")

    recorders = settings.get("recorders", [])
    if torch_bin is None and settings.get("torch"):
        torch_bin = ROOT / settings["torch"] / "bin"
    sockdir = Path(tempfile.mkdtemp(prefix="frx-sock-"))
    dumpdir = Path(tempfile.mkdtemp(prefix="frx-dump-"))  # torch's own dump files (fr_dump_file)
    env = dict(os.environ, FR_SOCKET_DIR=str(sockdir), TORCH_FR_BUFFER_SIZE=str(settings.get("buffer", 2000)),
               TORCH_FR_DUMP_TEMP_FILE=str(dumpdir / TORCH_DUMP_PREFIX), OMP_NUM_THREADS="1",
               **settings.get("env", {}))
    torchrun = (torch_bin or Path(sys.executable).parent) / "torchrun"
    cmd = [str(torchrun), "--standalone", f"--nproc-per-node={world}", *settings.get("torchrun_args", []),
           str(HERE / "scenarios" / f"{settings.get('script', scenario)}.py")]
    job = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    last: dict[int, dict[str, tuple[bytes, bytes]]] = {}  # rank -> recorder -> (JSON, pickle)
    fingerprint, changed_at = None, time.monotonic()
    start = time.monotonic()
    all_answered_at = None
    try:
        while time.monotonic() - start < limit_s:
            time.sleep(0.5)
            for r in range(world):
                sock = str(sockdir / f"rank-{r}.sock")
                if not os.path.exists(sock):
                    continue
                answers = _answers(sock, recorders)
                # (a recorder emptied after it held entries is the process exiting: torch destroys its
                # process groups, and their entries, at interpreter exit; the dump before is its last word)
                if answers and (r not in last or _holds_entries(answers) or not _holds_entries(last[r])):
                    last[r] = answers
            fp = hashlib.sha256(b"".join(js for r in sorted(last) for js, _ in last[r].values())).hexdigest()
            if fp != fingerprint:
                fingerprint, changed_at = fp, time.monotonic()
            # the snapshot clock starts once every rank has recorded a collective (a loaded machine
            # can take many seconds to get 8 ranks through init and new_group), or is gone: a rank
            # killed before its first answer held entries would otherwise hold the capture to its limit
            if all_answered_at is None and any(_holds_entries(a) for a in last.values()) and all(
                    (r in last and _holds_entries(last[r])) or _refuses(str(sockdir / f"rank-{r}.sock"))
                    for r in range(world)):
                all_answered_at = time.monotonic()
            if snapshot_after is not None:
                if all_answered_at is not None and time.monotonic() - all_answered_at >= snapshot_after:
                    break  # the previous round is the snapshot: every handler is warm, the round is quick
                continue
            if all_answered_at is not None and time.monotonic() - changed_at >= stable_s:
                break  # (polls that time out on a loaded machine change nothing: wait for real answers)
            if job.poll() is not None:
                break
        if settings.get("looks"):
            subprocess.run([sys.executable, "-m", "frexport", "snapshot", str(out), "--sockets-dir", str(sockdir),
                            "--rounds", "2", "--gap", str(settings["looks"]), "--stacks", "--force"], check=True,
                           timeout=120, stdout=subprocess.DEVNULL)
            last = {}  # the snapshot wrote the looks
        stacks = {r: _stack(sockdir, r) for r in range(world)}
        torch_dumps = _torch_dumps(sockdir, dumpdir, world, recorders)
        pyspy = {r: _pyspy(sockdir / f"rank-{r}.pid") for r in range(world)} if settings.get("pyspy") else {}
    finally:
        kill_tree(job.pid)  # torchrun's workers run in sessions of their own: kill the whole tree
        job.wait(30)
        shutil.rmtree(sockdir, ignore_errors=True)
        shutil.rmtree(dumpdir, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    if last:
        (out / "stacks").mkdir(exist_ok=True)
    if settings.get("looks"):
        stacks = {}
    for r, answers in sorted(last.items()):
        for name, (js, pk) in answers.items():
            if recorders and b'"entries"' not in js:
                continue  # this recorder holds nothing of this rank (a job with no gloo group)
            where = out if name == "gloo" else out / f"recorder-{name}"
            (where / "json").mkdir(parents=True, exist_ok=True)
            (where / f"trace_{r}").write_bytes(pk)
            (where / "json" / f"trace_{r}.json").write_bytes(js)
        if stacks.get(r):
            (out / "stacks" / f"rank_{r}.txt").write_bytes(stacks[r])
        if pyspy.get(r):
            (out / "stacks" / f"rank_{r}.pyspy_dump.txt").write_bytes(pyspy[r])
    for r, body in sorted(torch_dumps.items()):
        (out / "torch_dump").mkdir(exist_ok=True)
        (out / "torch_dump" / f"{TORCH_DUMP_PREFIX}{r}").write_bytes(body)
    version = torch.__version__ if torch_bin is None else subprocess.run(
        [str(torch_bin / "python"), "-W", "ignore", "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=True).stdout.strip()
    meta = {"scenario": scenario, "world_size": world, "torch": version, "backend": settings.get("backend", "gloo"),
            "description": DESCRIPTIONS[scenario],
            "captured_ranks": sorted(last) if not settings.get("looks") else list(range(world)),
            "stable_for_s": None if snapshot_after else stable_s, "snapshot_after_s": snapshot_after}
    if recorders:
        meta["recorders"] = {name: sorted(r for r in last if b'"entries"' in last[r][name][0])
                             for name in ["gloo", *recorders]}  # which ranks' dumps each recorder holds
        meta["torch_dump"] = f"torch_dump/{TORCH_DUMP_PREFIX}<rank>: fr_dump_file?backend={recorders[0]}"
    (out / "scenario.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _torch_dumps(sockdir: Path, dumpdir: Path, world: int, recorders: list[str]) -> dict[int, bytes]:
    """Each rank's dump file of the hooked recorder, written by torch itself (`fr_dump_file?backend=`,
    i.e. `_dump_fr_trace_file`) to <TORCH_FR_DUMP_TEMP_FILE><rank>, as its abort hook writes it."""
    if not recorders:
        return {}
    if len(recorders) > 1:
        raise ValueError("torch writes every recorder's dump file to the same <prefix><rank>: one recorder only")
    asked = [r for r in range(world)
             if _post(str(sockdir / f"rank-{r}.sock"), f"fr_dump_file?backend={recorders[0]}") is not None]
    # the handler answers "dump initiated": the file is written after it, in the rank's background
    paths = {r: dumpdir / f"{TORCH_DUMP_PREFIX}{r}" for r in asked}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(p.exists() for p in paths.values()):
        time.sleep(0.2)
    time.sleep(0.5)  # (a write still in progress: torch writes the file in place)
    return {r: p.read_bytes() for r, p in paths.items() if p.exists()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="?", choices=SCENARIOS + HOOKED)
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--all", action="store_true", help="every gloo scenario (torch 2.13)")
    ap.add_argument("--hooked", action="store_true", help="every hooked_* scenario (torch 2.15, .torch/2.15.0)")
    ap.add_argument("--torch", type=Path, help="the bin directory of another torch's environment "
                    "(.torch/2.15.0/bin): its torchrun runs the job")
    args = ap.parse_args()
    every = args.all or args.hooked
    todo = (SCENARIOS if args.all else []) + (HOOKED if args.hooked else []) if every else [args.scenario]
    if not every and (not args.scenario or not args.outdir):
        ap.error("give SCENARIO OUTDIR, or --all / --hooked")
    for s in todo:
        out = ROOT / "tests" / "fixtures" / "real" / s if every else Path(args.outdir)
        t = time.monotonic()
        meta = capture(s, out, torch_bin=args.torch)
        print(f"{s}: ranks {meta['captured_ranks']} in {time.monotonic() - t:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
