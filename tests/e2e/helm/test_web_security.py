"""TLS and basic auth on the metrics port, wired from the chart to frexport's web config, and the
NetworkPolicy. The rendered web config is served by a real `frexport serve` and scraped over real
HTTPS with the credentials the monitors would use.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.helm_tools import CHART, docs_of, one, pod_spec, secret_mounts, sidecar_of
from tests.support.ports import free_port

SECURE = CHART / "ci" / "secure-values.yaml"


def _get(port: int, ctx: ssl.SSLContext, auth: tuple[str, str] | None) -> int:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_rendered_web_config_serves_what_the_podmonitor_scrapes(helm, tmp_path, tls_dir):
    docs = docs_of(helm.template("-f", str(SECURE)))
    spec = pod_spec(docs)
    sidecar, _ = sidecar_of(spec)
    args = sidecar["args"]
    config_file = args[args.index("--web-config-file") + 1]
    # The kubelet cannot pass basic auth: probes are tcpSocket, on the metrics port.
    assert sidecar["livenessProbe"]["tcpSocket"] == {"port": "frexport-metrics"} == \
        sidecar["readinessProbe"]["tcpSocket"]
    ep = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert ep["scheme"] == "https" and ep["tlsConfig"]["serverName"] == "frexport-metrics"
    tls_volume = next(v for v in spec["volumes"] if v["name"] == "frexport-web-tls")
    assert ep["tlsConfig"]["ca"]["secret"] == {"name": tls_volume["secret"]["secretName"], "key": "ca.crt"}
    creds = one(docs, "Secret", ep["basicAuth"]["username"]["name"])["stringData"]
    user, password = creds[ep["basicAuth"]["username"]["key"]], creds[ep["basicAuth"]["password"]["key"]]

    # Lay the Secrets out as mounts, point the web config's paths at them, run the real sidecar.
    mounts = secret_mounts(sidecar, spec, docs, tmp_path, tls_dir)
    web_dir = Path(config_file).parent
    text = (mounts[str(web_dir)] / Path(config_file).name).read_text()
    for mount, host in mounts.items():
        text = text.replace(mount + "/", f"{host}/")
    host_config = tmp_path / "web-config.yml"
    host_config.write_text(text)
    port = free_port()
    for d in ("dumps", "evidence"):
        (tmp_path / "shared" / d).mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "frexport", "serve", "--sockets-dir", str(tmp_path / "shared"),
                             "--dump-dir", str(tmp_path / "shared" / "dumps"), "--evidence-dir",
                             str(tmp_path / "shared" / "evidence"), "--listen", f"127.0.0.1:{port}",
                             "--web-config-file", str(host_config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # Prometheus's side: the CA from the TLS Secret's ca.crt, the serverName the monitor names.
        ctx = ssl.create_default_context(cafile=str(mounts["/etc/frexport/tls"] / "ca.crt"))
        ctx.check_hostname = False  # 127.0.0.1 is not frexport-metrics; the chain is still verified
        deadline = time.monotonic() + 30
        while True:
            try:
                status = _get(port, ctx, (user, password))
                break
            except (OSError, ssl.SSLError):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read().decode()
                time.sleep(0.2)
        assert status == 200
        assert _get(port, ctx, (user, "wrong")) == 401
        assert _get(port, ctx, None) == 401
        with pytest.raises(OSError):  # plain HTTP is not served
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        proc.kill()
        proc.wait(10)


def test_tls_only_probes_use_https(helm):
    docs = docs_of(helm.template("--set", "example.enabled=true", "--set", "webConfig.enabled=true",
                                 "--set", "webConfig.tls.enabled=true"))
    sidecar, _ = sidecar_of(pod_spec(docs))
    assert sidecar["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert "basicAuth" not in one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    out = helm.run("template", "t", str(CHART), "--set", "webConfig.enabled=true",
                   "--set", "webConfig.basicAuth.enabled=true", check=False)
    assert out.returncode != 0 and "webConfig.basicAuth.password" in out.stderr


def test_networkpolicy_opens_the_metrics_port_to_prometheus_only_and_keeps_the_trainers_ports(helm):
    docs = docs_of(helm.template("-f", str(SECURE)))
    np = one(docs, "NetworkPolicy")
    pod_labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    metrics, others = np["spec"]["ingress"]
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9464}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    assert "from" not in others  # any source ...
    tcp = [(p["port"], p["endPort"]) for p in others["ports"] if p["protocol"] == "TCP"]
    assert tcp == [(1, 9463), (9465, 65535)]  # ... on every port but the metrics port: rendezvous (29500) stays open
    closed = docs_of(helm.template("-f", str(SECURE), "--set", "networkPolicy.allowOtherPorts=false"))
    assert len(one(closed, "NetworkPolicy")["spec"]["ingress"]) == 1
    assert not [d for d in docs_of(helm.template("-f", str(SECURE), "--set", "scope=workload"))
                if d["kind"] in ("NetworkPolicy", "Secret", "PodMonitor")]
