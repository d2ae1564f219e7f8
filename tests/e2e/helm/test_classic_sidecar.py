"""The classic (pre-native) sidecar's shell: a frexport killed before the trainer ended (as the OOM
killer would) is restarted, and the sidecar exits 0 once the trainer is done, so it never fails the Job."""

from __future__ import annotations

import os
import subprocess
import time

from tests.support.helm_tools import docs_of, pod_spec, sidecar_of

# Stands in for frexport: the first run is SIGKILLed (OOM), later runs serve until SIGTERM.
FAKE = """#!/bin/sh
n=$(cat "$RUNS" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$RUNS"
[ "$n" = 1 ] && kill -KILL $$
trap 'exit 0' TERM
while :; do sleep 0.2; done
"""


def test_oom_killed_frexport_is_restarted_and_the_sidecar_exits_0(helm, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    docs = docs_of(helm.template("--set", "example.enabled=true", "--set", "sidecar.native=false",
                                 "--set", f"sharedDir={shared}", "--set", "sidecar.drainSeconds=1"))
    sidecar, native = sidecar_of(pod_spec(docs))
    assert not native
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "frexport").write_text(FAKE)
    (bin_dir / "frexport").chmod(0o755)
    runs = tmp_path / "runs"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RUNS=str(runs))
    proc = subprocess.Popen(sidecar["command"] + sidecar["args"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (runs.exists() and runs.read_text().strip() == "2"):
            assert time.monotonic() < deadline and proc.poll() is None, "frexport was not restarted"
            time.sleep(0.2)
        (shared / ".trainer-exited").touch()  # the trainer's wrapper leaves this when it ends
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert "frexport exited with 137" in err and "restarting frexport" in err
    assert runs.read_text().strip() == "2"
