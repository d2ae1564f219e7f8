"""frexport.agent: serve each rank's Flight Recorder to the sidecar, with no change to training code.

Enable it with one environment variable, FREXPORT_AGENT_DIR (a directory the sidecar shares):
- `frexport-launch --dir /shared/frexport -- torchrun ... train.py` sets it and loads the agent in
  every Python process through a sitecustomize hook (frexport/agent/_bootstrap);
- or add `import frexport.agent` at the top of the training script (it enables itself when the
  variable is set), or call `frexport.agent.enable("/shared/frexport")`.

It acts only in a rank process (see `rank_process`): one started as a rank (LOCAL_RANK and RANK
set, as torchrun and other launchers set them for their workers), or a process that holds RANK
from its container (the Kubeflow training operator sets it) once it initializes the default
process group itself; torchrun's launcher never does. The first rank process records its pid in
FREXPORT_AGENT_RANK_PID, which its children (DataLoader and compile workers, subprocesses) inherit
with the rest of the rank's environment: a process whose marker names another pid is a child.
A socket whose rank-<N>.json names another live process is never taken.

In each rank process it:
1. sets Flight Recorder defaults unless already set: TORCH_FR_BUFFER_SIZE=2000 and the
   dump-on-timeout prefix TORCH_FR_DUMP_TEMP_FILE=<dir>/dumps/trace_ (PyTorch appends the rank);
2. waits, in a daemon thread, until the application itself has imported torch.distributed (so
   import order and start-up cost do not change), then starts PyTorch's worker server on
   <dir>/rank-<RANK>.sock. torchrun sets no TORCH_WORKER_SERVER_SOCKET, and one socket path
   cannot serve several ranks; a stale socket file left by a dead process is removed first;
3. registers two handlers: `frexport_fr_pickle`, the pickle dump, which carries each entry's
   Python stack frames (the JSON handlers never do), for evidence; and `frexport_fr_live` (live.py),
   what the sidecar polls: only the entries after its cursor, as JSON, without frames, at less
   than half the trainer's CPU of PyTorch's `fr_trace_json`;
   It also registers `frexport_profile` (profile.py): a short PyTorch profiler trace of the training
   thread, taken only when asked, rate-limited;
4. writes <dir>/rank-<RANK>.json: rank, pid, host, socket, torch version, job id, restart count;
5. keeps the rank's stdout and stderr, console unchanged, in <dir>/logs/rank-<RANK>.log (+ .1, each at
   most 1 MiB) through a log tee process (output.py, logtee.py); FREXPORT_AGENT_LOGS=0 turns it off.
Where the worker server does not exist (older torch) it writes atomic JSON snapshots to
<dir>/snapshots/trace_<RANK>.json every FREXPORT_AGENT_SNAPSHOT_INTERVAL seconds (default 5)
instead. Nothing in here may break or slow training: every failure is reported once, on stderr.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import socket
import sys
import sysconfig
import threading
import time

from frexport.files import atomic_write

ENV_DIR = "FREXPORT_AGENT_DIR"
ENV_RANK_PID = "FREXPORT_AGENT_RANK_PID"  # the rank process's pid, inherited by its children
PICKLE_HANDLER = "frexport_fr_pickle"
_DRAIN_QUIET_S = 0.3  # at exit, how long no handler may run before the server is stopped (_serve's stop)
_DRAIN_MAX_S = 10.0  # ... and the longest the exit waits for that

_lock = threading.Lock()
_enabled = False
_server = None  # keeps PyTorch's worker server alive
_closing = False  # the process is exiting: handlers answer at once
# A sidecar reading status first fetches a rank's entries only when they can say something new, so the
# last ones of a rank that exits would never be read (counts and spans lost). At exit the status says
# so, and the exit waits, briefly, for one last read of every recorder (FinalRead).
_FINAL_READ_WINDOW_S = 3.0  # a status request this recent: a sidecar reads this rank status first
_FINAL_READ_MAX_S = 3.0  # the longest the exit waits for its last read
_in_flight = 0  # handlers running now (changed under the GIL)


def _drained(handler):
    """`handler` counted while it runs, and answering 503 at once once the process is exiting."""

    def wrapper(req, resp) -> None:
        global _in_flight
        if _closing:
            resp.set_content("exiting", "text/plain")
            resp.set_status(503)
            return
        _in_flight += 1
        try:
            handler(req, resp)
        finally:
            _in_flight -= 1

    return wrapper


def enable(directory: str | None = None) -> bool:
    """Enable the agent in this process; returns whether it did (only in a rank process)."""
    global _enabled
    directory = directory or os.environ.get(ENV_DIR)
    rank = rank_process()
    if not directory or rank is None:
        return False
    with _lock:
        if _enabled:
            return True
        _enabled = True
    started_as_rank = os.environ.get("LOCAL_RANK", "").isdecimal()
    if started_as_rank:
        os.environ[ENV_RANK_PID] = str(os.getpid())  # before any child starts: they inherit it
    try:
        os.makedirs(os.path.join(directory, "dumps"), exist_ok=True)
        # Only the current names: torch >= 2.8 warns about the legacy TORCH_NCCL_* ones. On older
        # torch set TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE yourself.
        _set_default("TORCH_FR_BUFFER_SIZE", "2000")
        _set_default("TORCH_FR_DUMP_TEMP_FILE", os.path.join(directory, "dumps", "trace_"))
    except OSError as exc:
        _warn(f"cannot prepare {directory}: {exc}")
        return False
    if started_as_rank:
        _keep_output(directory, rank)
    threading.Thread(target=_when_torch_is_ready, args=(directory, rank, not started_as_rank),
                     name="frexport-agent", daemon=True).start()
    return True


def rank_process() -> int | None:
    """The rank this process may serve, or None where it is certainly not a rank process.

    RANK alone does not make a rank: the Kubeflow training operator sets it (the pod index) on the
    whole container, torchrun's launcher included, and every child of a rank inherits it. A process
    with RANK but no LOCAL_RANK is served only once it initializes the default process group itself
    (`_when_torch_is_ready`); one whose FREXPORT_AGENT_RANK_PID names another pid is a rank's child.
    """
    rank = os.environ.get("RANK", "")
    if not rank.isdecimal():
        return None
    owner = os.environ.get(ENV_RANK_PID)
    if owner and owner != str(os.getpid()):
        return None
    return int(rank)


def _keep_output(directory: str, rank: int) -> None:
    """The rank's stdout and stderr kept in <dir>/logs by a log tee process (output.py)."""
    try:
        from frexport.agent.output import capture

        capture(directory, rank, _warn)
    except Exception as exc:  # noqa: BLE001 - the output stays as it was
        _warn(f"the rank's output is not kept: {type(exc).__name__}: {exc}")


def _set_default(name: str, value: str) -> None:
    if not os.environ.get(name):
        os.environ[name] = value


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"frexport.agent: {message}\n")
    except Exception:  # noqa: BLE001 - a closed stderr must not matter
        pass


def _when_torch_is_ready(directory: str, rank: int, needs_group: bool) -> None:
    try:
        while "torch.distributed" not in sys.modules:
            time.sleep(0.2)
        time.sleep(0.2)  # let the application's own import of torch.distributed finish
        if needs_group:
            # RANK came with the container, not from a launcher: a launcher never initializes the
            # default group, a plain `python train.py` rank does before its first collective.
            while not sys.modules["torch.distributed"].is_initialized():
                time.sleep(0.5)
            os.environ[ENV_RANK_PID] = str(os.getpid())  # children started from now on stay out
            _keep_output(directory, rank)
        import torch

        c10d = torch._C._distributed_c10d
        owner = socket_owner(directory, rank)
        if owner is not None:
            _warn(f"rank {rank}'s socket belongs to process {owner}, which is alive: not serving it")
            return
        force_snapshots = os.environ.get("FREXPORT_AGENT_FORCE_SNAPSHOTS") == "1"  # test hook: no old torch here
        if hasattr(c10d, "_WorkerServer") and not force_snapshots:
            _serve(c10d, directory, rank, torch.__version__)
        else:
            _snapshots(c10d, directory, rank, torch.__version__)
    except Exception as exc:  # noqa: BLE001 - the agent must never take the trainer down
        _warn(f"disabled: {type(exc).__name__}: {exc}")


def socket_owner(directory: str, rank: int) -> int | None:
    """The pid of another live process that serves this rank, from its rank-<N>.json, else None.

    A pid alone is not enough where a restarted container shares the volume: the old rank's pid
    may now be another process, so the process start time recorded beside it must match too.
    """
    try:
        with open(os.path.join(directory, f"rank-{rank}.json"), "rb") as f:
            meta = json.loads(f.read(65536))
        pid = meta["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return None
    state, started = _proc_stat(pid)
    if state == "Z":
        return None  # killed, not yet reaped by its launcher
    if meta.get("pid_start") is not None and started is not None and started != meta["pid_start"]:
        return None  # the pid was reused
    return pid


def _proc_stat(pid: int) -> tuple[str | None, int | None]:
    """(state, start time in clock ticks since boot) from /proc, or Nones where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None, None


# Far more lost updates than a process can race through, and small enough that CPython 3.12+ never
# reads the count as immortal (its low 32 bits stay positive).
_REFCOUNT_MARGIN = 1 << 28


def _never_freed(obj: object) -> None:
    """Keep `obj` alive for good, even where C++ changes its reference count without the GIL.

    PyTorch (2.13) copies a Python handler's function object on each request, on the server's own
    threads and without the GIL: concurrent requests lose increments and decrements of its count,
    which drifts; at zero the function is freed on a thread without the GIL and the rank dies
    ("Fatal Python error: PyThreadState_Get", or SIGSEGV; 2 runs in 4 under 16 clients, and in CI
    under 2). Its registry also drops its reference after Python has finalized. One extra reference
    covers the second, not the first: the count gets a margin no drift can use up.
    """
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):  # free-threaded: counts are updated atomically
        count = ctypes.c_ssize_t.from_address(id(obj))  # ob_refcnt leads the object in release builds
        before = sys.getrefcount(obj)
        count.value += _REFCOUNT_MARGIN
        if sys.getrefcount(obj) - before == _REFCOUNT_MARGIN:
            return
        count.value -= _REFCOUNT_MARGIN  # another layout (a Py_TRACE_REFS debug build): undo
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _serve(c10d, directory: str, rank: int, torch_version: str) -> None:
    global _server
    path = os.path.join(directory, f"rank-{rank}.sock")
    if os.path.exists(path) or os.path.islink(path):
        os.unlink(path)  # its owner is gone (socket_owner): the server refuses an existing path
    # here: every process imports this module, few serve
    from frexport.agent.live import (
        LIVE_HANDLER,
        RECORDERS_HANDLER,
        STATUS_HANDLER,
        FinalRead,
        make_recorders_handler,
        make_status_handler,
    )
    from frexport.agent.live import make_handler as make_live_handler
    from frexport.agent.recorders import Recorders

    recorders = Recorders(c10d, sys.modules["torch.distributed"])
    final_read = FinalRead(recorders.names, _FINAL_READ_WINDOW_S, _FINAL_READ_MAX_S)
    handlers = {}
    try:
        # one status-only dump of every recorder this torch has, before anything is registered: a
        # torch whose dump API moved leaves PyTorch's own handlers alone on the server (the sidecar
        # polls those), says so, and never fails a request later
        listed = recorders.names()
        probe = recorders.dump(listed[0])
        assert probe is not None, f"no dump API for recorder {listed[0]}"  # names() lists those with one
        probe(False, False, False)

        def pickle_handler(req, resp):
            dump = recorders.dump(req.get_param("backend"))
            if dump is None:
                resp.set_content("no such recorder", "text/plain")
                resp.set_status(404)
                return
            resp.set_content(dump(), "application/octet-stream")
            resp.set_status(200)

        handlers = {PICKLE_HANDLER: pickle_handler, LIVE_HANDLER: make_live_handler(recorders.dump, final_read),
                    RECORDERS_HANDLER: make_recorders_handler(recorders.names, torch_version),
                    STATUS_HANDLER: make_status_handler(recorders.dump, final_read)}
        mode = "worker_server"
    except Exception as exc:  # noqa: BLE001 - an unknown torch must never harm the trainer
        _warn(f"this torch's Flight Recorder API is not one the agent knows ({type(exc).__name__}: {exc}): "
              "serving PyTorch's own handlers only")
        mode = "worker_server_pytorch_handlers"
    from frexport.agent import profile

    handlers[profile.PROFILE_HANDLER] = profile.make_handler(profile.from_environment())  # idle until asked
    names = c10d._get_handler_names()
    for name, raw in handlers.items():
        fn = _drained(raw)
        if name not in names:
            c10d._register_handler(name, fn)
            _never_freed(fn)
    _server = c10d._WorkerServer(path)
    # Never deallocated either: at exit the module's globals are cleared while Python finalizes, and
    # the server's destruction then ran C++ that touches Python without the GIL ("Fatal Python error:
    # PyThreadState_Get ... finalizing", an aborted rank, in 2 of 3 exits polled to the end).
    _never_freed(_server)
    owner_pid = os.getpid()
    # Connecting to a unix socket needs write permission on it. The sidecar usually runs as another
    # (non-root) user sharing the pod's group (fsGroup), so let the group in; others stay out.
    os.chmod(path, 0o660)
    _write_metadata(directory, rank, torch_version, mode, socket_path=path)

    def stop() -> None:
        if os.getpid() != owner_pid:
            return  # a forked child inherited this exit hook: the socket is its parent's
        final_read.wait()
        # PyTorch's shutdown() joins the server's threads while holding the GIL; one of our Python
        # handlers still running then (a first pickle with frames takes seconds) waits for the GIL
        # in one of them: both wait for ever (seen at exit with torch 2.13 under live polls). So
        # the socket goes first (no new request reaches the server), the handlers still running
        # finish, and requests already accepted are answered at once (_drained), while this thread
        # sleeps, which releases the GIL; only then the server is shut down.
        global _closing
        _closing = True
        if os.path.exists(path):
            os.unlink(path)
        deadline = time.monotonic() + _DRAIN_MAX_S
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if _in_flight:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= _DRAIN_QUIET_S:
                break
        else:
            return  # a handler that does not end: leave the server be rather than hang the exit
        if hasattr(_server, "shutdown"):
            _server.shutdown()

    atexit.register(stop)


def _snapshots(c10d, directory: str, rank: int, torch_version: str) -> None:
    interval = float(os.environ.get("FREXPORT_AGENT_SNAPSHOT_INTERVAL", "5"))
    out = os.path.join(directory, "snapshots")
    os.makedirs(out, exist_ok=True)
    # gloo's recorder where this torch has it, else the NCCL one; where both exist (CUDA builds), the
    # one that holds entries: the NCCL recorder is empty for gloo groups
    jsons = [f for f in (getattr(c10d, "_dump_fr_trace_json", None), getattr(c10d, "_dump_nccl_trace_json", None))
             if f is not None]

    def first_with_entries() -> bytes:
        dumps = []
        for f in jsons:
            d = f()
            d = d if isinstance(d, bytes) else d.encode()
            if b'"entries"' in d:
                return d
            dumps.append(d)
        return dumps[0]

    dump_json = first_with_entries if jsons else None
    dump_pickle = getattr(c10d, "_dump_nccl_trace", None)
    if dump_json is None and dump_pickle is None:
        _warn("this torch has neither a worker server nor a Flight Recorder dump API: nothing to serve")
        return
    _write_metadata(directory, rank, torch_version, "snapshots")
    name = f"trace_{rank}.json" if dump_json is not None else f"trace_{rank}"
    while True:
        try:
            # (torch's getattr above: not None where dump_json is; mypy cannot tell)
            data = dump_json() if dump_json is not None else dump_pickle()  # type: ignore[misc]
            atomic_write(os.path.join(out, name), data if isinstance(data, bytes) else data.encode())
        except Exception as exc:  # noqa: BLE001
            _warn(f"snapshot failed: {exc}")
        time.sleep(interval)


def _write_metadata(directory: str, rank: int, torch_version: str, mode: str, socket_path: str | None = None) -> None:
    meta = {
        "rank": rank, "local_rank": _int_env("LOCAL_RANK"), "world_size": _int_env("WORLD_SIZE"),
        "pid": os.getpid(), "pid_start": _proc_stat(os.getpid())[1], "hostname": socket.gethostname(),
        "socket": socket_path, "started_ns": time.time_ns(),
        "torch_version": torch_version, "job_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        "restart_count": _int_env("TORCHELASTIC_RESTART_COUNT"), "mode": mode,
        "pid_ns": _pid_ns(),  # lets a sidecar tell whether "pid" means the same process where it runs
    }
    atomic_write(os.path.join(directory, f"rank-{rank}.json"), json.dumps(meta).encode())


def _pid_ns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _int_env(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v and v.isdecimal() else None


if os.environ.get(ENV_DIR):
    enable()
