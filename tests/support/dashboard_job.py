"""The dashboards' scenario: a 4-rank job in which rank 2 stops and rank 1 once used the wrong dtype,
read by a real `frexport serve` and scraped by a real Prometheus with the frexport alert rules.

tests/e2e/test_dashboards.py tests the dashboards on it, and dashboards/render.py draws the pictures in
docs/ from it (that test also checks the committed pictures still show what it gives).

It runs as a live job on the night of a hang: the recorder's times are those of the moment the scenario
runs (the synthetic timeline shifted as a whole, every interval kept), one all_reduce every STEP_S,
snapshotted as it goes the way frexport.agent snapshots ranks where torch has no worker server (a dump
directory read with `timeout_dumps: false`: these are not PyTorch's timeout dumps). With times from when
the dumps were made, every wait would read as the dumps' age (weeks), and a job that was progressing as
stuck from the start. Rank 2 stops after LAST_STEP while its peers issue the next all_reduce and wait in
it; the snapshots go on showing that until FrexportRankStalled fires (its `for` is a minute), when an
on-call engineer would open the dashboards.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.support import paths
from tests.support.promserver import PromServer
from tests.support.sidecar import Sidecar
from tests.support.synth import dump, entry, write

STEP_S = 2  # the job's step (one all_reduce per rank) and how often every rank is snapshotted
FIRST_STEP, LAST_STEP = 10, 24  # all_reduces done when the first snapshot is taken; rank 2's last
STALLED = 2
FIRING = 'ALERTS{alertname="FrexportRankStalled", alertstate="firing"}'


def snapshot(directory: Path, steps: int, t0_ns: int) -> None:
    """Every rank's recorder after `steps` all_reduces (the first at `t0_ns`), the other ranks in the next."""
    step_ns = STEP_S * 10**9
    job = {r: [entry(i, i + 1, created=t0_ns + i * step_ns + r * 1000, duration_ms=1.0 + (i % 7) * 3 + r,
                     dtype="BFloat16" if (r == 1 and i == 5) else "Float") for i in range(steps)]
           for r in range(4)}
    for r in set(job) - {STALLED}:
        job[r].append(entry(steps, steps + 1, state="started", created=t0_ns + steps * step_ns))
    # whole files only, as the agent writes them (write, then rename): a half-written one is a decode error
    staging = Path(tempfile.mkdtemp(dir=directory.parent))
    write(staging, {r: dump(es, world=4) for r, es in job.items()})
    for f in staging.iterdir():
        os.replace(f, directory / f.name)
    staging.rmdir()


def _at(monotonic: float) -> None:
    time.sleep(max(0.0, monotonic - time.monotonic()))


@contextmanager
def stalled_job(directory: Path, hang_timeout_s: float = 150) -> Iterator[PromServer]:
    """Yields the Prometheus once FrexportRankStalled fires; the sidecar and Prometheus run until the exit."""
    dumps = directory / "dumps"
    dumps.mkdir()
    config = directory / "frexport.yaml"
    config.write_text(yaml.safe_dump({"sources": {"dump_dirs": [{"path": str(dumps), "timeout_dumps": False}]}}))
    with Sidecar("--config", str(config), "--stall-after", "5s", env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"}) as sc, \
            PromServer(targets=[(f"127.0.0.1:{sc.port}", {"job": "train", "namespace": "ml", "pod": "p0"})],
                       rule_files=[str(paths.RULES)]) as prom:
        start = time.monotonic()
        t0_ns = time.time_ns() - FIRST_STEP * STEP_S * 10**9  # the first snapshot's newest entry: now
        for k in range(LAST_STEP - FIRST_STEP + 1):
            _at(start + k * STEP_S)
            snapshot(dumps, FIRST_STEP + k, t0_ns)
        hang = time.monotonic()
        while not prom.query(FIRING):  # the ranks are still snapshotted: the same entries, later
            assert time.monotonic() - hang < hang_timeout_s, "FrexportRankStalled did not fire"
            k += 1
            _at(start + k * STEP_S)
            snapshot(dumps, LAST_STEP, t0_ns)
        yield prom
