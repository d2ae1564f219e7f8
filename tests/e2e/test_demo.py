"""The README's main job on a fresh machine: ./scripts/demo.sh with nothing but Python on PATH (no
npm, apt, helm, curl) sets up a venv of frexport's runtime dependencies, diagnoses the bundled real
dumps and serves their metrics, naming the stalled rank."""

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import ROOT
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

# What scripts/demo.sh may call besides Python: shell basics. Anything else (npm, apt-get, helm) fails.
TOOLS = ("bash", "dirname", "mktemp", "rm", "cat")


def _python_only_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (bin_dir / "python3").symlink_to(base_python)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def _statuses(port: int) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {s.labels["rank"]: s.labels["status"] for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "frexport_rank_status" and s.value == 1.0}


def _samples(port: int, *names: str) -> dict[tuple[str, str], float]:
    """(name, rank) -> value of the named series."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, s.labels.get("rank", "")): s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name in names}


def test_demo_needs_only_python_and_names_the_stalled_rank(tmp_path):
    port = free_port()
    venv = tmp_path / "venv"
    env = {"PATH": _python_only_path(tmp_path), "HOME": os.environ.get("HOME", str(tmp_path)),
           "FREXPORT_VENV": str(venv), "FREXPORT_LISTEN": f"127.0.0.1:{port}"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("PIP_", "SSL_", "REQUESTS_"))})
    log = tmp_path / "demo.log"
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ROOT / "scripts" / "demo.sh")], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        statuses, deadline = {}, time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                statuses = _statuses(port)
            except OSError:
                pass
            if statuses.get("2") == "stalled":
                break
            time.sleep(0.5)
        took = time.monotonic() - start
        assert statuses == {"0": "blocked", "1": "blocked", "2": "stalled", "3": "blocked"}, log.read_text()[-3000:]
        # one story: the stall and the waiting ranks' pending collective are timed by the same clock
        # (the recorder's, these dumps' file times being none): fractions of a millisecond, not days
        values = _samples(port, "frexport_rank_stall_seconds", "frexport_oldest_pending_collective_age_seconds")
        stall = values[("frexport_rank_stall_seconds", "2")]
        ages = [v for (name, _), v in values.items() if name == "frexport_oldest_pending_collective_age_seconds"]
        assert 0 < stall < 0.01 and len(ages) == 3 and max(ages) == pytest.approx(stall, abs=1e-6), values
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    serve_started = text.index("== frexport serve")
    served = text[serve_started:]
    print(f"fresh demo: stalled rank on /metrics after {took:.1f} s")
    # a clean demo logs no error, warning or skipped file (the dumps' stacks/*.txt are not dumps)
    assert not [line for line in served.splitlines() if " error " in line or " warning " in line
                or "skipped" in line or "Traceback" in line], served
    assert "== installing frexport and its runtime dependencies" in text
    assert "missing_rank [root cause]" in text and "culprit: 2   blocked: 0, 1, 3" in text
    assert f"curl -s http://127.0.0.1:{port}/metrics" in text
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, env=env, timeout=60).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in freeze.split()}
    assert "frexport" in names and not names & {"torch", "pytest", "hypothesis", "ruff", "bcrypt", "grpcio"}
