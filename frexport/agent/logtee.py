"""frexport's log tee: one small process per rank that keeps the rank's last words.

    python -S logtee.py --dir <dir>/logs --rank 3 --host node7 --stream out:5 --stream err:6

The rank's stdout and stderr (fds 1 and 2) are pipes to this process (frexport/agent/output.py sets
them up). Every byte read is written unchanged to this process's own fd 1 or 2, which are where the
rank's output went before (the console torchrun or the container runtime reads): the trainer's output
does not change. Each line is also appended, prefixed `[<host>:<rank>] <UTC time> out| ` (or `err| `),
to a bounded ring of files, `<dir>/rank-<rank>.log` and its predecessor `rank-<rank>.log.1`, each at
most RING_BYTES: the newest 1-2 MiB of the rank's output, which the sidecar puts in evidence bundles.

Why a process and not a thread in the trainer: a thread needs the GIL, and a trainer stuck in native
code holding it would leave the pipe unread until its writes block; this process never needs anything
of the trainer. It must outlive the rank's last words and never stop the trainer:
- it runs in a session of its own (torchrun's killpg is for the rank) and ignores SIGINT, SIGTERM,
  SIGHUP and SIGQUIT, blocked from its start until then; it exits when every writer of its pipes is
  gone (EOF: the rank and its children), after copying what they wrote;
- the console write is the only one the trainer can wait for, as it would have without the tee; a
  console that went away (EPIPE) is no longer written, and the pipes are still drained;
- the ring files are written by a thread of their own behind a bounded queue (QUEUE_BYTES): a slow or
  full volume drops ring lines (the file says how many bytes), never the console's.

Standard library only, and run with `python -S` (no site, no sitecustomize): it starts in
milliseconds and loads nothing of the trainer's environment.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import stat
import sys
import threading
import time
from collections import deque

RING_BYTES = 1 << 20  # per file: rank-<R>.log, then rotated to rank-<R>.log.1
QUEUE_BYTES = 4 << 20  # ring bytes waiting for the file writer; beyond, ring lines are dropped
CHUNK = 64 << 10  # read per wake-up
MAX_LINE = 16 << 10  # a longer line (a progress bar without newlines) is cut into ring lines of this size
IDLE_FLUSH_S = 1.0  # an unfinished line waits this long for its end before it goes to the ring
HOLD_S = 0.05  # ... and this long before it goes to the console (a prompt, a progress bar)
EXIT_FLUSH_S = 10.0  # at EOF, the longest the ring writer may take to catch up
IGNORED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Ring:
    """Appends bytes to `<dir>/<name>`, moved to `<name>.1` (replacing it) before it would pass
    `cap`: the two files hold the newest bytes written, between `cap` and 2 * `cap` of them.

    The directory is opened once without following links and every name is resolved under it with
    O_NOFOLLOW: a link planted in the shared volume redirects nothing."""

    def __init__(self, directory: str, name: str, cap: int = RING_BYTES) -> None:
        self.name = name
        self.cap = cap
        os.makedirs(directory, mode=0o750, exist_ok=True)
        self._dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC)
        self._fd = -1
        self._size = 0
        self._open()

    def _open(self) -> None:
        # O_NONBLOCK: a FIFO planted under the name must not block the open; a regular file ignores it
        fd = os.open(self.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC,
                     0o640, dir_fd=self._dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.name} is not a regular file")
        try:
            os.fchmod(fd, 0o640)  # the sidecar reads it as another user of the pod's group, whatever the umask
        except OSError:
            pass  # not ours to change (another user's file): written all the same
        self._fd, self._size = fd, st.st_size

    def write(self, data: bytes) -> None:
        if len(data) > self.cap:  # only the newest bytes could stay anyway: from a line's start
            data = data[-self.cap:]
            data = data[data.find(b"\n") + 1:] or data
        if self._size and self._size + len(data) > self.cap:
            os.close(self._fd)
            os.rename(self.name, self.name + ".1", src_dir_fd=self._dfd, dst_dir_fd=self._dfd)
            self._open()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            self._size += n
            view = view[n:]

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._dfd)


class RingWriter:
    """The ring's own thread: `put` never waits for the volume; what exceeds QUEUE_BYTES is dropped,
    and the next write says how many bytes were."""

    def __init__(self, ring: Ring | None, limit: int = QUEUE_BYTES) -> None:
        self.ring = ring
        self.limit = limit
        self.dropped = 0
        self._queue: deque[bytes] = deque()
        self._pending = 0
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="ring", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        if not data or self.ring is None:
            return
        with self._cond:
            if self._pending + len(data) > self.limit:
                self.dropped += len(data)
                return
            self._queue.append(data)
            self._pending += len(data)
            self._cond.notify()

    def close(self, timeout: float) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = b"".join(self._queue)
                self._queue.clear()
                self._pending = 0
                dropped, self.dropped = self.dropped, 0
            if dropped:
                batch = b"[frexport logtee: %d bytes of this rank's output not kept: the volume was slow]\n" % dropped \
                    + batch
            try:
                assert self.ring is not None
                self.ring.write(batch)
            except OSError as exc:
                _say(f"the log ring stopped ({exc}); the console still gets everything")
                with self._cond:
                    self.ring = None
                    self._queue.clear()
                    self._pending = 0
                return


class Lines:
    """One stream's bytes cut into prefixed lines for the ring; an unfinished line is held back
    until its end comes, MAX_LINE passes, or the stream is idle (`flush`)."""

    def __init__(self, prefix: bytes, tag: bytes) -> None:
        self.head = prefix
        self.tag = tag
        self.partial = b""

    def feed(self, data: bytes, stamp: bytes) -> bytes:
        data = self.partial + data
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:]
        out = self._prefixed(data[:cut], stamp) if cut else b""
        if len(self.partial) >= MAX_LINE:
            out += self.flush(stamp)
        return out

    def flush(self, stamp: bytes) -> bytes:
        if not self.partial:
            return b""
        line, self.partial = self.partial, b""
        return self._prefixed(line + b"\n", stamp)

    def _prefixed(self, lines: bytes, stamp: bytes) -> bytes:
        head = b"%s %s %s| " % (self.head, stamp, self.tag)
        return head + lines[:-1].replace(b"\n", b"\n" + head) + b"\n"


def stamp_now() -> bytes:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)).encode() + b".%03dZ" % (int(now * 1000) % 1000)


def forward(fd: int, data: bytes) -> bool:
    """Write all of `data` to the console `fd`, as the rank would have (it waits where the rank would
    have waited); False once the console is gone (EPIPE, a closed fd): it is not written again."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:  # a console left non-blocking by someone: wait until it takes more
            select.select([], [fd], [], 1.0)
        except OSError:
            return False
    return True


def run(streams: dict[int, tuple[int, bytes]], ring: RingWriter, prefix: bytes) -> None:
    """Copy each pipe (fd -> (console fd, tag)) to its console and the ring until every pipe ends."""
    lines = {fd: Lines(prefix, tag) for fd, (_, tag) in streams.items()}
    console = {fd: out for fd, (out, _) in streams.items()}
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    held = {fd: b"" for fd in streams}  # an unfinished line for the console, briefly (HOLD_S)
    idle_ms, hold_ms = int(IDLE_FLUSH_S * 1000), int(HOLD_S * 1000)
    while lines:
        events = poller.poll(hold_ms if any(held.values()) else idle_ms)
        stamp = stamp_now()
        if not events:
            for fd, part in held.items():
                if part and fd in console and not forward(console[fd], part):
                    del console[fd]
                held[fd] = b""
            for cut in lines.values():
                ring.put(cut.flush(stamp))
            continue
        for fd, _ in events:
            if fd not in lines:
                continue
            try:
                data = os.read(fd, CHUNK)
            except OSError:
                data = b""
            if not data:  # every writer is gone
                ring.put(lines.pop(fd).flush(stamp))
                poller.unregister(fd)
                data, held[fd] = held[fd], b""
            else:
                ring.put(lines[fd].feed(data, stamp))
                data = held[fd] + data
                # whole lines go on at once; the rest waits a moment for its end, so that ranks sharing a
                # console do not cut into each other's lines where the rank wrote a line in pieces
                end = data.rfind(b"\n") + 1 if len(data) < MAX_LINE else len(data)
                data, held[fd] = data[:end], data[end:]
            out = console.get(fd)
            if data and out is not None and not forward(out, data):
                del console[fd]


def _say(message: str) -> None:
    try:
        os.write(2, f"frexport logtee: {message}\n".encode(errors="replace"))
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)  # the rank's last words come after these; EOF ends this
    # output.py starts this process with them blocked, so that none came before they were ignored: one
    # pending now is discarded
    signal.pthread_sigmask(signal.SIG_UNBLOCK, IGNORED)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a console gone is EPIPE, handled in forward
    p = argparse.ArgumentParser(prog="logtee")
    p.add_argument("--dir", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--host", default="")
    p.add_argument("--stream", action="append", default=[], help="out:FD or err:FD, a pipe to copy")
    p.add_argument("--ring-bytes", type=int, default=RING_BYTES)
    args = p.parse_args(argv)
    streams = {}
    for s in args.stream:
        tag, fd = s.split(":")
        streams[int(fd)] = (1 if tag == "out" else 2, tag.encode())
    try:
        ring: Ring | None = Ring(args.dir, f"rank-{args.rank}.log", args.ring_bytes)
    except OSError as exc:
        _say(f"cannot keep rank {args.rank}'s output in {args.dir} ({exc}); the console still gets everything")
        ring = None
    writer = RingWriter(ring)
    host = args.host.encode(errors="replace")
    run(streams, writer, b"[%s:%d]" % (host, args.rank))
    writer.close(EXIT_FLUSH_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
