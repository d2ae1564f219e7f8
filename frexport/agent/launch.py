"""`frexport-launch [--dir DIR] [--] COMMAND ...`: run a training command with frexport.agent enabled.

    frexport-launch --dir /shared/frexport -- torchrun --nproc-per-node 8 train.py

Sets FREXPORT_AGENT_DIR and puts frexport's sitecustomize hook first on PYTHONPATH, so every
Python process the command starts loads the agent; it acts only in rank processes (the training
workers), not in torchrun's launcher nor in a rank's children (frexport.agent.rank_process). Then
it execs the command.
"""

from __future__ import annotations

import argparse
import os
import sys

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="frexport-launch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", help="shared directory for sockets and dumps (default: $FREXPORT_AGENT_DIR, "
                                 "else /tmp/frexport)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run, e.g. frexport-launch -- torchrun train.py")
    directory = os.path.abspath(args.dir or os.environ.get("FREXPORT_AGENT_DIR") or "/tmp/frexport")
    os.makedirs(directory, exist_ok=True)
    os.environ["FREXPORT_AGENT_DIR"] = directory
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = BOOTSTRAP + (os.pathsep + path if path else "")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"frexport-launch: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
