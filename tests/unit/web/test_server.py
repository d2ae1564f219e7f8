"""The sidecar's endpoints: /metrics, /healthz, /readyz; TLS and basic auth from a web-config file."""

import base64
import ssl
import subprocess
import urllib.error
import urllib.request

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from frexport.cli.serve import build_sidecar, start_web
from frexport.config import Config, ConfigError, DumpDir
from frexport.web.server import WebServer
from frexport.web.web_config import load_web_config
from tests.support.synth import dump, healthy_job, write


def _sidecar(tmp_path, web_config=None):
    d = write(tmp_path / "dumps", {r: dump(es, world=2) for r, es in healthy_job(world=2).items()})
    cfg = Config()
    cfg.sources.dump_dirs = [DumpDir(path=str(d))]
    cfg.web.listen = "127.0.0.1:0"
    cfg.web.config_file = web_config
    sc, registry = build_sidecar(cfg)
    web = start_web(cfg, registry, sc.ready_event.is_set)
    return sc, web


def _get(url, headers=None, context=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_plain_endpoints_and_nothing_else(tmp_path):
    sc, web = _sidecar(tmp_path)
    try:
        base = f"http://127.0.0.1:{web.port}"
        assert _get(base + "/healthz") == (200, "ok\n")
        assert _get(base + "/readyz")[0] == 503  # no pass over the sources yet
        sc.ready_event.set()
        assert _get(base + "/readyz")[0] == 200
        status, body = _get(base + "/metrics")
        assert status == 200 and 'frexport_build_info{version="0.1.0"} 1.0' in body
        assert _get(base + "/etc/passwd")[0] == 404 and _get(base + "/metrics/../x")[0] == 404
    finally:
        sc.shutdown()
        web.stop()


@pytest.fixture
def tls_files(tmp_path):
    key, crt = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return crt, key


def test_tls_and_basic_auth(tmp_path, tls_files):
    crt, key = tls_files
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    wc = tmp_path / "web.yml"
    wc.write_text(f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                  f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    sc, web = _sidecar(tmp_path, str(wc))
    ctx = ssl.create_default_context(cafile=str(crt))
    try:
        url = f"https://127.0.0.1:{web.port}/metrics"
        assert _get(url, context=ctx)[0] == 401
        bad = "Basic " + base64.b64encode(b"prometheus:wrong").decode()
        assert _get(url, {"Authorization": bad}, ctx)[0] == 401
        good = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
        status, body = _get(url, {"Authorization": good}, ctx)
        assert status == 200 and "frexport_build_info" in body
        assert _get(url, {"Authorization": good}, ctx)[0] == 200  # cached verification
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _get(f"http://127.0.0.1:{web.port}/metrics")  # plain HTTP is not spoken
        # A client that connects and never handshakes does not hold up others.
        import socket

        idle = socket.create_connection(("127.0.0.1", web.port))
        assert _get(url, {"Authorization": good}, ctx)[0] == 200
        idle.close()
    finally:
        sc.shutdown()
        web.stop()


def test_bad_web_config_names_the_problem(tmp_path):
    wc = tmp_path / "web.yml"
    wc.write_text("tls_server_config:\n  cert_file: /nonexistent\n  key_file: /nonexistent\n")
    with pytest.raises(ConfigError, match="TLS files"):
        load_web_config(str(wc))
    wc.write_text("basic_auth_user: {}\n")
    with pytest.raises(ConfigError, match="unknown field basic_auth_user"):
        load_web_config(str(wc))


def test_dual_stack_listen_serves_ipv4_and_ipv6():
    # `--listen [::]:9464` (the chart's and frexport inject's default): one socket for both families.
    web = WebServer("[::]:0", CollectorRegistry(), lambda: True)
    web.start()
    try:
        assert _get(f"http://127.0.0.1:{web.port}/healthz") == (200, "ok\n")
        assert _get(f"http://[::1]:{web.port}/healthz") == (200, "ok\n")
    finally:
        web.stop()
