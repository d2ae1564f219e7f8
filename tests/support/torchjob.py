"""Run real torch gloo jobs for tests: torchrun under frexport-launch, always cleaned up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.proctree import kill_tree

BIN = Path(sys.executable).parent
JOBS = paths.JOBS


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.fail("torch is not installed: run scripts/setup.sh (pip install torch==2.13.0)")


# Environments with other torch builds, one per version (scripts/setup.sh makes them: the PyPI wheels
# users install, CUDA builds run on CPU with gloo): .torch/<version>/bin/{python,torchrun,frexport-launch}.
TORCH_ENVS = paths.ROOT / ".torch"


def torch_envs() -> dict[str, Path]:
    """version -> bin dir: the tests' own torch (2.13.0+cpu) and every environment under .torch/."""
    envs = {"2.13": BIN}
    if TORCH_ENVS.is_dir():
        for d in sorted(TORCH_ENVS.iterdir()):
            if (d / "bin" / "torchrun").exists():
                envs[d.name] = d / "bin"
    return envs


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class TorchJob:
    """`frexport-launch --dir DIR -- torchrun --standalone --nproc-per-node N script args...`"""

    def __init__(self, script: str, shared: Path, nproc: int = 4, args: tuple = (), env: dict | None = None,
                 launch: bool = True, rendezvous: tuple[str, ...] = ("--standalone",), name: str = "",
                 bin_dir: Path | None = None) -> None:
        """`rendezvous`: torchrun's rendezvous options; one node of a multi-node job is e.g.
        ("--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:PORT").
        `bin_dir`: the environment whose torch runs the job (`torch_envs()`), else the tests' own."""
        if bin_dir is None:
            require_torch()
        bin_dir = bin_dir or BIN
        self.shared = shared
        self.nproc = nproc
        cmd = [str(bin_dir / "torchrun"), *rendezvous, f"--nproc-per-node={nproc}", str(JOBS / script), *args]
        if launch:
            cmd = [str(bin_dir / "frexport-launch"), "--dir", str(shared), "--"] + cmd
        full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        self.log = shared.parent / f"{script}{name}.log"
        self.proc = subprocess.Popen(cmd, env=full_env, start_new_session=True, stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT)

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None and not predicate():
                raise AssertionError(f"job exited ({self.proc.returncode}) before {what}:\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output()}")

    def sockets_ready(self) -> bool:
        return all((self.shared / f"rank-{r}.sock").exists() for r in range(self.nproc))

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL torchrun and every worker at once, like an OOM kill of the whole job."""
        kill_tree(self.proc.pid)
        self.proc.wait(30)

    def __enter__(self) -> "TorchJob":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
