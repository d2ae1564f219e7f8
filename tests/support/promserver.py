"""A real Prometheus server for tests: scrapes given targets on 127.0.0.1, evaluates rule files.

    with PromServer(targets=[("127.0.0.1:9464", {"job": "train", "namespace": "ml", "pod": "p0"})],
                    rule_files=[RULES]) as prom:
        prom.wait_for(lambda: prom.query('up') != [], timeout=30)
        prom.alerts()
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.ports import free_port


class PromServer:
    def __init__(self, targets: list[tuple[str, dict]] = (), rule_files: list[str] = (),
                 interval: str = "1s") -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus not found: install Debian's 'prometheus' package (scripts/setup.sh does)")
        self.dir = Path(tempfile.mkdtemp(prefix="frx-prom-"))
        self.port = free_port()
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(Path(f).resolve()) for f in rule_files],
            "scrape_configs": [{
                "job_name": "frexport",
                "honor_labels": True,  # keep the target's own job label (the training job)
                "static_configs": [{"targets": [t], "labels": labels} for t, labels in targets],
            }],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=open(self.dir / "log", "wb"), stderr=subprocess.STDOUT)
        self.wait_for(self._ready, timeout=30, what="prometheus to be ready")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            doc = json.loads(e.read())
        if doc.get("status") != "success":
            raise ValueError(f"{path} {params}: {doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}; prometheus log:\n" +
                             (self.dir / "log").read_text(errors="replace")[-2000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "PromServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
