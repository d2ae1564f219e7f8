"""Native stacks of a rank's process, taken by the sidecar on an incident: py-spy, else gdb.

The sidecar runs the tool on the rank's pid (from the agent's rank-<N>.json, only where the trainer
shares our pid namespace: the chart's `shareProcessNamespace`, with `SYS_PTRACE` to attach). Both
tools stop the process while they read it: py-spy for about a second, gdb for as long as it takes
to load torch's symbols (12 s measured on a 2-core machine), so it runs only on incidents, for the
culprits and a few blocked ranks, one rank at a time, each within a timeout. The text written says
which tool took it, on its first line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

PYSPY_TIMEOUT_S = 10.0
GDB_TIMEOUT_S = 30.0
MAX_OUTPUT = 4 << 20


def tool() -> tuple[str, str] | None:
    """(name, path) of the tool this machine has, py-spy first (it stops the process for less long)."""
    for name in ("py-spy", "gdb"):
        path = shutil.which(name)
        if path:
            return name, path
    return None


def command(name: str, path: str, pid: int) -> list[str]:
    if name == "py-spy":
        return [path, "dump", "--native", "--pid", str(pid)]
    return [path, "-p", str(pid), "-batch", "-nx", "-iex", "set auto-load off", "-ex", "set pagination off",
            "-ex", "thread apply all bt"]


def capture(rank: int, pid: int, found: tuple[str, str] | None = None) -> str:
    """The native stacks of `pid` as text, headed by the tool and its command; a failure is said in the
    text (a bundle says why a stack is missing), never raised."""
    found = found or tool()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if found is None:
        return (f"# native stacks of rank {rank} (pid {pid}): none taken at {stamp}: neither py-spy nor gdb "
                "is on the sidecar's PATH\n")
    name, path = found
    cmd = command(name, path, pid)
    timeout = PYSPY_TIMEOUT_S if name == "py-spy" else GDB_TIMEOUT_S
    head = f"# native stacks of rank {rank} (pid {pid}) by {name}: {' '.join(cmd)} at {stamp}\n"
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              env=dict(os.environ, LC_ALL="C"))
    except subprocess.TimeoutExpired:
        return head + f"# {name} did not finish within {timeout:g} s: no stacks\n"
    except OSError as exc:
        return head + f"# {name} could not run: {exc}\n"
    took = time.monotonic() - start
    out = done.stdout[:MAX_OUTPUT].decode(errors="replace")
    if done.returncode != 0 or not out.strip():
        err = done.stderr[-2000:].decode(errors="replace").strip()
        return head + f"# {name} exited {done.returncode} after {took:.1f} s: {err}\n" + out
    return head + f"# took {took:.1f} s\n" + out
