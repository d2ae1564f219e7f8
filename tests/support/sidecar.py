"""Run `frexport serve` as a subprocess for tests, and read its /metrics."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_LISTENING = re.compile(r"serving /metrics.* \(port (\d+)\)")  # serve's and jobview's log line


class Sidecar:
    def __init__(self, *args: str, env: dict | None = None, log: Path | None = None, command: str = "serve") -> None:
        # port 0 and the port it says it took: a port picked free here can be taken by another sidecar
        # started meanwhile, and then /healthz answers from that one while this one has died
        cmd = [sys.executable, "-m", "frexport", command, "--listen", "127.0.0.1:0", *args]
        self.log = log
        self._own_log = None if log else tempfile.NamedTemporaryFile(prefix="frexport-serve-", suffix=".log")
        path = log or Path(self._own_log.name)
        with open(path, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=dict(os.environ, **(env or {})), stdout=out,
                                         stderr=subprocess.STDOUT)
        self.port = self._wait_for_port(path)
        self.get("/healthz")

    def _wait_for_port(self, path: Path) -> int:
        deadline = time.monotonic() + 60  # slow on a loaded 2-core machine
        while time.monotonic() < deadline:
            said = _LISTENING.search(path.read_text(errors="replace"))
            if said:
                return int(said.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"frexport serve exited ({self.proc.returncode}): "
                                     f"{path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        self.proc.kill()  # nobody holds this object to stop it
        self.proc.wait(10)
        raise AssertionError("frexport serve did not start")

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return r.read().decode()

    def samples(self) -> list:
        out = []
        for fam in text_string_to_metric_families(self.get("/metrics")):
            out.extend(fam.samples)
        return out

    def value(self, name: str, **labels) -> float | None:
        for s in self.samples():
            if s.name == name and all(s.labels.get(k) == str(v) for k, v in labels.items()):
                return s.value
        return None

    def statuses(self) -> dict[int, str]:
        return {int(s.labels["rank"]): s.labels["status"] for s in self.samples()
                if s.name == "frexport_rank_status" and s.value == 1.0}

    def stop(self, timeout: float = 10.0) -> float:
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        return time.monotonic() - start

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log else ""

    def __enter__(self) -> "Sidecar":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._own_log:
            self._own_log.close()
