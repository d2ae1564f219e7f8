"""`python -m frexport.inject.prepare AGENT_DIR SHARED_DIR`: the injected init container's work.

Creates the shared directory's dumps/ (writable by any trainer user: PyTorch writes there as the
trainer) and evidence/, and copies the agent (frexport/__init__.py and frexport/agent/, which import
nothing else of frexport and only the standard library) into AGENT_DIR, which the trainer mounts
read-only and puts on PYTHONPATH. Source only, no bytecode: the trainer's Python may be another
version than the sidecar image's.
"""

from __future__ import annotations

import os
import shutil
import sys

import frexport

PACKAGE = os.path.dirname(os.path.abspath(frexport.__file__))


def prepare(agent_dir: str, shared_dir: str) -> None:
    for sub in ("dumps", "evidence"):
        os.makedirs(os.path.join(shared_dir, sub), exist_ok=True)
    os.chmod(os.path.join(shared_dir, "dumps"), 0o1777)
    dst = os.path.join(agent_dir, "frexport")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy2(os.path.join(PACKAGE, "__init__.py"), dst)
    shutil.copytree(os.path.join(PACKAGE, "agent"), os.path.join(dst, "agent"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m frexport.inject.prepare AGENT_DIR SHARED_DIR", file=sys.stderr)
        return 2
    prepare(*args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
