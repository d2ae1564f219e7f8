"""The rendered pod run for real: init step, sidecar and trainer commands on a local torchrun job.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support.helm_tools import (
    ROOT,
    container,
    docs_of,
    pod_spec,
    resolve_env,
    scrape_metrics,
    sidecar_of,
)
from tests.support.ports import free_port
from tests.support.torchjob import require_torch


@pytest.mark.torchjob
def test_rendered_pod_runs_a_real_torchrun_job(helm, tmp_path):
    """The example pod (classic sidecar: the most moving parts) run as the kubelet would, on this
    machine: the init step copies the agent out of the 'image' (here: .venv), the sidecar runs its
    rendered shell wrapper and `frexport serve` args, the trainer runs its rendered command
    (frexport-launch wrapper from the injected agent, torchrun, 2 ranks); the sidecar reads both ranks
    over their sockets, and exits 0 after the trainer's exit marker, as the Job needs."""
    require_torch()
    shared, agent = tmp_path / "shared", tmp_path / "agent"
    text = helm.template("--set", "example.enabled=true", "--set", "example.nodes=1", "--set",
                         "example.nprocPerNode=2", "--set", "example.steps=60", "--set", "sidecar.native=false",
                         "--set", "sidecar.drainSeconds=1", "--set", f"sharedDir={shared}", "--set",
                         f"agent.mountPath={agent}")
    spec = pod_spec(docs_of(text))
    venv_bin = str(ROOT / ".venv" / "bin")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FREXPORT_", "OTEL_", "TORCH_"))}
    base_env["PATH"] = venv_bin + os.pathsep + base_env.get("PATH", "")
    base_env.pop("PYTHONPATH", None)

    # 1. The preparation init container ("/frexport-agent" is its mount of the agent volume).
    init = spec["initContainers"][0]
    assert init["command"][:2] == ["python", "-c"]
    script = init["command"][2].replace('"/frexport-agent"', repr(str(agent)))
    subprocess.run([sys.executable, "-c", script], check=True, env=base_env, timeout=60)
    assert (shared / "dumps").is_dir() and (shared / "dumps").stat().st_mode & 0o1777 == 0o1777
    launcher = agent / "bin" / "frexport-launch"
    assert os.access(launcher, os.X_OK) and (agent / "frexport" / "agent" / "__init__.py").is_file()

    # 2. The sidecar, as rendered (only the listen address moves to a free loopback port).
    sidecar, native = sidecar_of(spec)
    assert not native
    port = free_port()
    args = [a.replace("[::]:9464", f"[::]:{port}") for a in sidecar["args"]]
    fields = {"metadata.name": "t-frexport-example-0-x", "metadata.namespace": "ml", "spec.nodeName": "node-a",
              "metadata.labels['batch.kubernetes.io/job-name']": "t-frexport-example"}
    side = subprocess.Popen([*sidecar["command"], *args], env={**base_env, **resolve_env(sidecar, fields)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    trainer_proc = None
    try:
        # 3. The trainer, as rendered (rendezvous on loopback; the script from the chart's files/).
        trainer = container(spec["containers"], "trainer")
        rdzv = free_port()
        command = [str(ROOT / "helm" / "frexport" / "files" / "example-train.py") if a == "/opt/example/train.py"
                   else "0" if a == "$(JOB_COMPLETION_INDEX)"
                   else "127.0.0.1" if a == "t-frexport-example-0.t-frexport-example"
                   else str(rdzv) if a == "29500" else a for a in trainer["command"]]
        tenv = {**base_env, **resolve_env(trainer, {}), "EXAMPLE_STEP_SECONDS": "0.1"}
        trainer_proc = subprocess.Popen(command, env=tenv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
        metrics, deadline = "", time.monotonic() + 90
        wanted = [r'frexport_source_up{source="socket:rank-0"} 1.0', r'frexport_source_up{source="socket:rank-1"} 1.0']
        while time.monotonic() < deadline and trainer_proc.poll() is None:
            metrics = scrape_metrics(port)
            if all(w in metrics for w in wanted) and re.search(
                    r'frexport_pg_last_completed_collective\{[^}]*rank="1"[^}]*\} [1-9]', metrics):
                break
            time.sleep(0.5)
        assert all(w in metrics for w in wanted), metrics or "no scrape"
        assert re.search(r'frexport_pg_last_completed_collective\{[^}]*rank="1"[^}]*\} [1-9]', metrics), metrics
        out, _ = trainer_proc.communicate(timeout=120)
        assert trainer_proc.returncode == 0, out
        assert (shared / ".trainer-exited").exists()
        assert json.loads((shared / "rank-1.json").read_text())["mode"] == "worker_server"
        # 4. The classic sidecar sees the marker, drains, stops frexport and exits 0.
        side_out, _ = side.communicate(timeout=30)
        assert side.returncode == 0, side_out
        assert "stopped" in side_out
    finally:
        for p in (trainer_proc, side):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
