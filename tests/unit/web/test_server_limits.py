"""Clients that try to hold the metrics server: slowloris, too many connections; user names by timing.
Real sockets against the real server."""

import base64
import socket
import struct
import threading
import time
import urllib.request

import bcrypt
from prometheus_client import CollectorRegistry

from frexport.web.server import WebServer
from frexport.web.web_config import load_web_config


def _web(**limits):
    registry = CollectorRegistry(auto_describe=False)
    web = WebServer("127.0.0.1:0", registry, lambda: True, **limits)
    registry.register(web)
    web.start()
    return web


def _closed_within(sock, seconds):
    """Whether the server closed the connection within `seconds` while we trickle a byte at a time."""
    end = time.monotonic() + seconds
    sock.settimeout(0.2)
    while time.monotonic() < end:
        try:
            sock.sendall(b"G")
            if sock.recv(1024) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def _dropped(web, reason):
    """frexport_http_connections_dropped_total{reason}, from the server's collector: what a scrape
    shows, without taking a connection (at the cap, a scrape sent as the last request's thread ends
    can itself be refused: it was, once, on a loaded machine)."""
    for family in web.collect():
        for sample in family.samples:
            if sample.name == "frexport_http_connections_dropped_total" and sample.labels.get("reason") == reason:
                return sample.value
    return None


def test_a_trickling_client_is_cut_off_at_the_head_deadline():
    web = _web(head_deadline_s=0.5)
    try:
        s = socket.create_connection(("127.0.0.1", web.port))
        start = time.monotonic()
        assert _closed_within(s, 6.0)  # each byte arrives well within any per-read timeout
        assert time.monotonic() - start < 2.0
        s.close()
        assert _dropped(web, "head_deadline") == 1
    finally:
        web.stop()


def test_idle_connections_over_the_cap_give_way_and_scrapes_go_on():
    """100 idle connections (no request sent) against a cap of 4: each new one takes the place of the
    oldest idle one, so a scrape is answered at once, never refused for their sake."""
    web = _web(head_deadline_s=5.0, max_connections=4)
    idle = []
    try:
        for _ in range(100):
            idle.append(socket.create_connection(("127.0.0.1", web.port)))
        start = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{web.port}/healthz", timeout=5) as r:
            assert r.status == 200
        assert time.monotonic() - start < 2.0
        assert _dropped(web, "evicted_idle") >= 96
    finally:
        for s in idle:
            s.close()
        web.stop()


def test_connections_over_the_cap_busy_with_requests_are_closed_at_once():
    answering, answer = threading.Semaphore(0), threading.Event()

    def slow(path, query):  # a request being answered: its connection is busy, not idle
        answering.release()
        answer.wait(10)  # until the test has seen the extra connection closed
        return 200, b"{}", "application/json"

    web = _web(max_connections=2, api=slow)
    busy = [socket.create_connection(("127.0.0.1", web.port)) for _ in range(2)]
    try:
        for s in busy:
            s.sendall(b"GET /api/v1/ranks HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answering.acquire(timeout=10) and answering.acquire(timeout=10)  # both are being answered
        extra = socket.create_connection(("127.0.0.1", web.port))
        # closed, not queued: nothing idle to give way. A queued connection would stay open until the
        # busy ones are answered (the test holds them) or its 10 s client timeout, so an end of stream
        # within 8 s is the refusal; no tighter bound, which a loaded machine breaks (it did once)
        extra.settimeout(8)
        assert extra.recv(10) == b""
        extra.close()
        answer.set()
        for s in busy:
            s.settimeout(5)
            assert s.recv(12).startswith(b"HTTP/1.0 200")  # the busy ones were served
        assert _dropped(web, "max_connections") == 1
    finally:
        answer.set()
        for s in busy:
            s.close()
        web.stop()


def test_unknown_user_costs_what_a_wrong_password_costs(tmp_path):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    wc = tmp_path / "web.yml"
    wc.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    authorize = load_web_config(str(wc)).authorize

    def cost(user):
        header = "Basic " + base64.b64encode(f"{user}:wrong".encode()).decode()
        start = time.perf_counter()
        assert authorize(header) is False
        return time.perf_counter() - start

    known = min(cost("prometheus") for _ in range(3))
    unknown = min(cost("nobody") for _ in range(3))
    assert unknown > known / 3, (unknown, known)  # was 100x faster: the name was findable


def test_a_client_gone_before_its_answer_prints_no_traceback(capfd):
    # socketserver prints a handler's exception with its traceback to stderr; a scraper that gives up
    # (here: resets its connection while the answer is being made) is routine, not an error
    answering, answer = threading.Event(), threading.Event()

    def slow(path, query):
        answering.set()
        answer.wait(10)
        return 200, b"{}" * 100_000, "application/json"

    web = _web(api=slow)
    try:
        s = socket.create_connection(("127.0.0.1", web.port))
        s.sendall(b"GET /api/v1/ranks HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answering.wait(10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset, not a polite close: the answer's write fails
        answer.set()
        time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{web.port}/healthz", timeout=5) as r:
            assert r.status == 200  # and the server goes on
    finally:
        answer.set()
        web.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
