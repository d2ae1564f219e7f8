"""Issue 28, deliverable 5, at start-up: `serve --check-config` stops on a web-config option frexport
cannot honour, and `jobview` sends basic auth to peers only over TLS. A real `python -m frexport`
process each; the options themselves are tested in process in tests/unit/web/test_web_config_options.py."""

import os
import subprocess
import sys

import pytest

from tests.unit.web.test_web_config_options import REFUSED, pki, refused_config  # noqa: F401 - pki: a fixture


@pytest.mark.parametrize("extra, says", REFUSED)
def test_an_option_frexport_cannot_honour_stops_serve_at_start(pki, tmp_path, extra, says):  # noqa: F811
    wc = refused_config(pki, tmp_path, extra)
    out = subprocess.run([sys.executable, "-m", "frexport", "serve", "--check-config", "--dump-dir", str(tmp_path),
                          "--web-config-file", str(wc)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and says in out.stderr


def test_peer_tls_settings_with_only_plain_http_peers_are_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "frexport", "jobview", "--peer", "http://10.0.0.7:9464",
                          "--check-config"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FREXPORT_PEERS__CA_FILE": "/etc/hosts"})
    assert out.returncode == 2 and "peers.ca_file: set, but every peer is plain http" in out.stderr


@pytest.mark.parametrize("peer, flag, ok", [
    ("http://10.0.0.7:9464", [], False),
    ("http://10.0.0.7:9464", ["--peers-basic-auth-over-http"], True),
    ("https://10.0.0.7:9464", [], True),
])
def test_basic_auth_to_peers_only_over_tls(tmp_path, peer, flag, ok):
    (tmp_path / "pw").write_text("s3cret\n")
    env = {"FREXPORT_PEERS__USERNAME": "jobview", "FREXPORT_PEERS__PASSWORD_FILE": str(tmp_path / "pw"),
           }
    out = subprocess.run([sys.executable, "-m", "frexport", "jobview", "--peer", peer, "--check-config", *flag],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert (out.returncode == 0) == ok, out.stderr
    if not ok:
        assert "password in clear text to http://10.0.0.7:9464" in out.stderr


def test_a_plain_text_basic_auth_password_stops_serve_at_start(tmp_path):
    """Issue 38, point 7: `serve` started with it and every login was then 401. Now it does not start:
    one line on stderr, exit 2 (the start itself, not --check-config)."""
    wc = tmp_path / "web.yml"
    wc.write_text("basic_auth_users:\n  prometheus: hunter2\n")
    out = subprocess.run([sys.executable, "-m", "frexport", "serve", "--listen", "127.0.0.1:0", "--dump-dir",
                          str(tmp_path), "--web-config-file", str(wc)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "the value of user 'prometheus' is not a bcrypt hash" in out.stderr and "hunter2" not in out.stderr


@pytest.mark.parametrize("env, says", [
    ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "traces: OTEL_TRACES_SAMPLER='jaeger_remote': use one of always_on"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "10%"}, "OTEL_TRACES_SAMPLER_ARG='10%'"),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "a ratio from 0 to 1"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nan"}, "a ratio from 0 to 1"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "traces: OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"),
    ({"OTEL_BSP_SCHEDULE_DELAY": "5s"}, "traces: OTEL_BSP_SCHEDULE_DELAY='5s': milliseconds"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01", "OTEL_BSP_SCHEDULE_DELAY": "500"},
     None),
])
def test_otlp_settings_spans_would_refuse_stop_serve_at_start(tmp_path, env, says):
    """Where spans are on, an OTEL_* value the exporter or the sampler would not take is a config error (the
    SDK's sampler would fall back to sending every span, saying so in a log line; a protocol it does not
    speak was a traceback); with spans off they are not read."""
    for traces, expect in (("true", says), ("false", None)):
        out = subprocess.run([sys.executable, "-m", "frexport", "serve", "--check-config", "--dump-dir", str(tmp_path)],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, **env, "FREXPORT_TRACES__ENABLED": traces})
        if expect is None:
            assert out.returncode == 0, out.stderr
        else:
            assert out.returncode == 2 and expect in out.stderr, out.stderr
