"""A rank's stdout and stderr, kept by the log tee (logtee.py) beside the sockets, its console unchanged.

At enable time, in a rank process, fds 1 and 2 become pipes to a log tee process, which copies every
byte to where they went before and keeps the newest lines in `<dir>/logs/rank-<RANK>.log` (+ `.1`).
What the trainer pays: two pipes and one small process per rank, started once (no thread reads
anything in the trainer while the tee lives), and its writes now go into a pipe of 1 MiB.

Nothing here may break training:
- the tee cannot start (no interpreter, no memory): fds 1 and 2 are never touched;
- the tee dies: a watcher thread, asleep in waitpid until then, puts the console back on fds 1 and 2
  and copies what is left in the pipes (and what forked children, which keep the pipes, write later)
  to the console. Until it does, the rank's writes never fail with EPIPE: the rank keeps a reader of
  each pipe open (unread while the tee lives), so at worst a write waits for the watcher.
- a stream that is a terminal is left alone (FREXPORT_AGENT_LOGS=tty takes it too): a pipe there
  would change what programs print (isatty: colours, progress bars).
FREXPORT_AGENT_LOGS=0 turns the capture off.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

ENV_LOGS = "FREXPORT_AGENT_LOGS"  # "0": off; "tty": terminals too; anything else: pipes and files only
TEE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logtee.py")
PIPE_BYTES = 1 << 20  # what a rank may write while nothing reads (Linux's unprivileged maximum)
_HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}  # what the tee ignores (logtee.IGNORED)
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Python 3.10+ names it; the value is Linux's)


def logs_dir(directory: str) -> str:
    return os.path.join(directory, "logs")


def capture(directory: str, rank: int, warn=lambda message: None) -> int | None:
    """Start the rank's log tee and move fds 1 and 2 onto it; its pid, or None where nothing changed."""
    mode = os.environ.get(ENV_LOGS, "1").strip().lower()
    if mode in ("0", "false", "no", "off") or not sys.executable:
        return None
    fds = [fd for fd in (1, 2) if _is_open(fd) and (mode == "tty" or not os.isatty(fd))]
    if not fds:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()  # what Python holds goes out before the switch, in order
        except Exception:  # noqa: BLE001
            pass
    pipes = {fd: os.pipe() for fd in fds}  # (read, write), not inherited by what the rank runs
    try:
        for r, _ in pipes.values():
            _grow(r)
        host = socket.gethostname().split(".")[0]
        cmd = [sys.executable, "-S", TEE, "--dir", logs_dir(directory), "--rank", str(rank), "--host", host]
        cmd += [arg for fd in fds for arg in ("--stream", f"{'out' if fd == 1 else 'err'}:{pipes[fd][0]}")]
        # its own session: torchrun's killpg (SIGTERM, then SIGKILL after 30 s) is for the rank; the tee
        # ends when the rank's (and its children's) ends of the pipes are closed
        # the signals the tee ignores are blocked while it starts (a blocked mask is inherited through exec,
        # and the tee unblocks them once it ignores them): a Ctrl-C or killpg in its first milliseconds
        # would end it before it can; this thread's mask only, so the trainer loses no signal
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            tee = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, pass_fds=[r for r, _ in pipes.values()],
                                   start_new_session=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        for r, w in pipes.values():
            os.close(r)
            os.close(w)
        warn(f"the rank's output is not kept ({type(exc).__name__}: {exc}); the console is unchanged")
        return None
    consoles = {fd: os.dup(fd) for fd in fds}  # where the output went: restored if the tee dies
    for fd, (_, w) in pipes.items():
        os.dup2(w, fd)  # inheritable: the rank's children write into the pipe too
        os.close(w)
    spare = {fd: r for fd, (r, _) in pipes.items()}  # a reader kept: no EPIPE while the tee is gone
    threading.Thread(target=_watch, args=(tee, consoles, spare, warn), name="frexport-logtee-watch",
                     daemon=True).start()
    return tee.pid


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _grow(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), PIPE_BYTES)
    except (OSError, ImportError):
        pass  # the default 64 KiB: the rank waits sooner for a slow console, as it would have without us


def _watch(tee: subprocess.Popen, consoles: dict[int, int], spare: dict[int, int], warn) -> None:
    """Asleep until the tee exits while the rank lives (it should not: it ends after the rank):
    then the console goes back on fds 1 and 2 and the pipes are drained to it."""
    try:
        status = tee.wait()
    except ChildProcessError:  # the trainer reaps its children itself (SIGCHLD ignored): poll instead
        while _alive(tee.pid):
            time.sleep(1.0)
        status = None
    for fd, console in consoles.items():
        os.dup2(console, fd)
    warn(f"the log tee exited ({status}): the rank's output goes straight to the console again and is "
         "no longer kept")
    readers = {r: consoles[fd] for fd, r in spare.items()}
    while readers:  # what the tee left unread, and what forked children write into the pipes from now on
        ready, _, _ = select.select(list(readers), [], [])
        for r in ready:
            data = os.read(r, 65536)
            if not data:
                del readers[r]
                continue
            try:
                os.write(readers[r], data)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True
