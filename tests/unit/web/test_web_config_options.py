"""Issue 28, deliverable 5: every exporter-toolkit web-config option is honoured or refused at start-up,
and basic auth goes to peers only over TLS. Real certificates (openssl), the real server, real clients.
The start-up checks of `serve` and `jobview`, a process each, are in tests/e2e/test_check_config.py."""

import json
import socket
import ssl
import subprocess
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from frexport.config import ConfigError
from frexport.web.server import WebServer
from frexport.web.web_config import load_web_config


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and two client certificates: 'scraper.example' and 'evil.example'."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=test-ca", cwd=d)
    for name, san in (("server", "IP:127.0.0.1"), ("scraper", "DNS:scraper.example"), ("evil", "DNS:evil.example")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


def _serve(pki, tmp_path, tls_extra: str, http_extra: str = ""):
    wc = tmp_path / "web.yml"
    wc.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
                  + tls_extra + http_extra)
    c = load_web_config(str(wc))
    registry = CollectorRegistry(auto_describe=False)
    web = WebServer("127.0.0.1:0", registry, lambda: True, c.wrap_socket, c.authorize, headers=c.headers)
    registry.register(web)
    web.start()
    return web


def _client(pki, cert=None, **versions):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    for k, v in versions.items():
        setattr(ctx, k, v)
    return ctx


def _get(web, ctx):
    with urllib.request.urlopen(f"https://127.0.0.1:{web.port}/healthz", timeout=5, context=ctx) as r:
        return r.status, dict(r.headers)


def test_client_allowed_sans_lets_in_only_those_names(pki, tmp_path):
    web = _serve(pki, tmp_path, f"  client_ca_file: {pki / 'ca.crt'}\n  client_auth_type: RequireAndVerifyClientCert\n"
                                "  client_allowed_sans: [scraper.example]\n")
    try:
        assert _get(web, _client(pki, "scraper"))[0] == 200
        with pytest.raises(OSError):  # a certificate the CA signed, for another name: refused
            _get(web, _client(pki, "evil"))
        with pytest.raises(OSError):
            _get(web, _client(pki))
        assert _get(web, _client(pki, "scraper"))[0] == 200
        metrics = urllib.request.urlopen(urllib.request.Request(f"https://127.0.0.1:{web.port}/metrics"),
                                         context=_client(pki, "scraper"), timeout=5).read().decode()
        assert 'frexport_http_connections_dropped_total{reason="tls"} 2.0' in metrics
    finally:
        web.stop()


def test_max_version_cipher_suites_and_headers_are_honoured(pki, tmp_path):
    web = _serve(pki, tmp_path, "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n",
                 "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n")
    try:
        status, headers = _get(web, _client(pki))
        assert status == 200 and headers["Strict-Transport-Security"] == "max-age=31536000"
        with socket.create_connection(("127.0.0.1", web.port), 5) as raw, \
                _client(pki).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() == "TLSv1.2" and s.cipher()[0] == "ECDHE-RSA-AES256-GCM-SHA384"
        with pytest.raises(OSError):  # a client that speaks only TLS 1.3
            _get(web, _client(pki, minimum_version=ssl.TLSVersion.TLSv1_3))
    finally:
        web.stop()


# web configs frexport refuses, and what it says
REFUSED = [
    ("  curve_preferences: [X25519]\n", "curve_preferences cannot be honoured"),
    ("  min_version: TLS10\n", "TLS 1.0 and 1.1 are not offered"),
    ("  max_version: TLS14\n", "max_version 'TLS14' is not one of"),
    ("  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "'TLS_RSA_WITH_RC4_128_SHA' is not a suite frexport knows"),
    ("  client_allowed_sans: [a]\n", "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert"),
    ("  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("  client_auth_type: RequireAnyClientCert\n", "cannot be honoured"),
    ("  client_ca_file: @CA@\n", "client_ca_file is set but client_auth_type is NoClientCert"),
    ("  cert: inline-pem\n", "tls_server_config.cert is not an option frexport honours"),
    ("http_server_config:\n  http2: true\n", "http2: true is not served"),
    ("http_server_config:\n  headers:\n    Content-Length: '0'\n", "'Content-Length' cannot be set"),
    ("http_server_config:\n  tls: x\n", "http_server_config.tls is not an option"),
]


def refused_config(pki, tmp_path, extra):
    wc = tmp_path / "web.yml"
    extra = extra.replace("@CA@", str(pki / "ca.crt"))
    wc.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n" + extra)
    return wc


@pytest.mark.parametrize("extra, says", REFUSED)
def test_an_option_frexport_cannot_honour_is_refused_at_start(pki, tmp_path, extra, says):
    with pytest.raises(ConfigError) as exc:
        load_web_config(str(refused_config(pki, tmp_path, extra)))
    assert says in str(exc.value)
    # that `serve` stops at start-up saying so, and the peers' settings `jobview` refuses: a process each,
    # in the e2e tier (tests/e2e/test_check_config.py)


@pytest.mark.parametrize("value", [
    "hunter2", "$2y$10$short", "$2y$03$" + "a" * 53, "$2y$10$" + "a" * 52 + "!", "$1$salt$md5crypt",
    "$2y$10$" + "a" * 53 + "\n",
])
def test_a_basic_auth_value_that_is_not_a_bcrypt_hash_is_refused_at_start(tmp_path, value):
    """Issue 38, point 7: a plain-text password started `serve` silently, then every login was a 401.
    Refused at start as exporter-toolkit refuses it, without echoing the value (it may be a password)."""
    wc = tmp_path / "web.yml"
    wc.write_text(f"basic_auth_users:\n  prometheus: {json.dumps(value)}\n")
    with pytest.raises(ConfigError) as exc:
        load_web_config(str(wc))
    assert "basic_auth_users: the value of user 'prometheus' is not a bcrypt hash" in str(exc.value)
    assert value.strip() not in str(exc.value)
