"""A rank that dies of an exception says why: real torch gloo jobs under torchrun and frexport-launch,
the real sidecar beside them (issue 40, point 3).

The rank's console output is unchanged (torchrun's output still holds its traceback, line for line),
the agent's log tee keeps every line with a `[host:rank]` prefix in the ring file beside the sockets,
the sidecar's evidence bundle carries the rank's last lines, and the finding that names it quotes its
last error line, in the bundle's report and in `frexport analyze BUNDLE`.
"""

import json
import re
import socket
import subprocess
import sys

import pytest

from tests.support.sidecar import Sidecar
from tests.support.torchjob import TorchJob, torch_envs

ERROR = "RuntimeError: loss is NaN at step"
HOST = socket.gethostname().split(".")[0]
VERSIONS = [v for v in torch_envs() if v in ("2.13", "2.15.0")]


def _bundles(evidence):
    return sorted(p for p in evidence.iterdir() if not p.name.startswith(".")) if evidence.exists() else []


@pytest.mark.torchjob
@pytest.mark.parametrize("version", VERSIONS)
def test_a_rank_that_raises_is_quoted_in_the_bundle_and_its_console_is_unchanged(tmp_path, version):
    shared, evidence, crash = tmp_path / "shared", tmp_path / "evidence", tmp_path / "crash"
    env = {"CRASH_RANK": "3", "CRASH_FILE": str(crash)}
    with TorchJob("train_raises.py", shared, nproc=4, env=env, bin_dir=torch_envs()[version],
                  rendezvous=("--standalone", "--monitor-interval=3600")) as job, \
            Sidecar("--sockets-dir", str(shared), "--evidence-dir", str(evidence), "--poll-interval", "1s",
                    "--entries-interval", "1s", "--stall-after", "6s", env={"FREXPORT_ANALYSIS__INTERVAL": "0.5s"},
                    log=tmp_path / "serve.log") as sc:
        job.wait_for(lambda: all(sc.value("frexport_source_up", source=f"socket:rank-{r}") == 1.0 for r in range(4))
                     and {"rank 0 step 1", "rank 3 step 1"} <= set(job.log.read_text(errors="replace").splitlines()),
                     timeout=120, what="every rank polled, two steps done")
        crash.touch()  # rank 3 raises 2 s into its next step: its peers wait far less than the stall threshold
        job.wait_for(lambda: any("missing_rank" in b.name for b in _bundles(evidence)), timeout=90,
                     what=f"a bundle; sidecar: {sc.output()}")
        bundle = next(b for b in _bundles(evidence) if "missing_rank" in b.name)
        # the tee copies a rank's last words a few ms after it wrote them (later on a loaded machine)
        job.wait_for(lambda: ERROR in job.log.read_text(errors="replace"), timeout=30,
                     what="rank 3's last words on the console")
        console = job.log.read_text(errors="replace").splitlines()

    # the ring file beside the sockets: every line prefixed with host:rank, a time and the stream
    ring = (shared / "logs" / "rank-3.log").read_text()
    head = rf"^\[{re.escape(HOST)}:3\] \d{{4}}-\d\d-\d\dT[\d:.]+Z (out|err)\| "
    said = [(m[1], line[m.end():]) for line in ring.splitlines() if (m := re.match(head, line))]
    assert len(said) == len(ring.splitlines()), ring
    # its last words: the exception on stderr (then only torch's own warnings as the process exits)
    words = [(i, stream, line) for i, (stream, line) in enumerate(said) if ERROR in line]
    assert words and words[-1][1] == "err" and ("out", "rank 3 step 0") in said, ring
    step = int(re.search(rf"{ERROR} (\d+)$", words[-1][2])[1])
    assert all("RuntimeError" not in line for _, line in said[words[-1][0] + 1:])
    assert (shared / "logs" / "rank-3.log").stat().st_mode & 0o777 == 0o640  # the sidecar's group reads it

    # the console: everything rank 3 wrote, line for line as it wrote it (torch's own `[rank3]:`
    # before its traceback included), in order, with no prefix of ours
    at = 0
    for _, line in said:
        at = console.index(line, at) + 1
    assert any(line.endswith(f"{ERROR} {step}") for line in console) and "rank 0 step 1" in console

    # the bundle: rank 3's last lines, signed like every file, and the finding quoting its error
    kept = (bundle / "logs" / "rank_3.log").read_text()
    assert ring.endswith(kept) and f"err| {words[-1][2]}\n" in kept, kept[-500:]
    assert "logs/rank_3.log" in json.loads((bundle / "manifest.json").read_text())["files"]
    report = (bundle / "report.txt").read_text()
    finding = report.split("\n\n")[1]
    assert "culprit: 3 " in finding and "rank 3 left the job" in finding, report
    assert re.search(rf"last error line of rank 3 \(printed \S+Z\): {ERROR} {step}$", finding, re.M), report
    doc = json.loads((bundle / "report.json").read_text())
    assert doc["findings"][0]["last_error_lines"]["3"]["line"] == f"{ERROR} {step}"

    # frexport analyze on the bundle says the same
    out = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(bundle)], capture_output=True, text=True,
                         timeout=120)
    assert re.search(rf"last error line of rank 3 \(printed \S+Z\): {ERROR} {step}$", out.stdout, re.M), out.stdout
    assert "logs" not in out.stdout.split("notes:")[-1]  # read as logs, not listed as files that are no dump


@pytest.mark.torchjob
def test_no_capture_when_turned_off(tmp_path):
    shared, crash = tmp_path / "shared", tmp_path / "crash"
    crash.touch()
    with TorchJob("train_raises.py", shared, nproc=2, env={"CRASH_RANK": "1", "CRASH_FILE": str(crash),
                                                          "FREXPORT_AGENT_LOGS": "0"}) as job:
        assert job.proc.wait(120) != 0
    assert f"{ERROR} 0" in job.output() and not (shared / "logs").exists()
