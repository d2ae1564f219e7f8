"""The daemon's log: in JSON mode every line is JSON, whoever writes it; text lines keep tracebacks."""

import io
import json
import logging
import sys
import threading
import warnings

import pytest

from frexport import logs


class _Err:
    def __init__(self, capsys):
        self.capsys, self.text = capsys, ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


@pytest.fixture
def stderr(capsys):
    """What logs.setup's handler writes to stderr; logging is put back as pytest had it afterwards."""
    buf = _Err(capsys)
    logging.captureWarnings(False)  # another test may have left warnings captured by its own handler
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.excepthook, threading.excepthook)
    try:
        yield buf
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        sys.excepthook, threading.excepthook = saved[2], saved[3]
        logging.captureWarnings(False)
        for name in ("frexport", "opentelemetry"):
            logging.getLogger(name).handlers.clear()


def _boom():
    raise ValueError("the cause")


def test_json_mode_writes_only_json_lines_whoever_logs(stderr):
    log = logs.setup("json", "info")
    log.info("plain", extra={"rank": 3})
    try:
        _boom()
    except ValueError:
        log.exception("analysis failed")
    # what the OTLP exporter logs when the collector is down
    logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").warning(
        "Transient error %s encountered while exporting traces, retrying in %ss.", "UNAVAILABLE", 1)
    logging.getLogger("urllib3.connectionpool").warning("some other library")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    t = threading.Thread(target=_boom, name="frexport-poll_0")
    t.start()
    t.join()
    lines = stderr.getvalue().splitlines()
    docs = [json.loads(line) for line in lines]  # raises on any non-JSON line
    assert docs[0]["msg"] == "plain" and docs[0]["rank"] == 3
    assert "ValueError: the cause" in docs[1]["exc"]
    otel = [d for d in docs if d.get("logger", "").startswith("opentelemetry")]
    assert otel and otel[0]["level"] == "warning" and "UNAVAILABLE" in otel[0]["msg"]
    assert any(d.get("logger") == "urllib3.connectionpool" for d in docs)
    assert any("deprecated thing" in d["msg"] for d in docs)
    uncaught = [d for d in docs if "uncaught exception in thread frexport-poll_0" in d["msg"]]
    assert uncaught and "ValueError: the cause" in uncaught[0]["exc"]


def test_text_mode_keeps_tracebacks(stderr):
    log = logs.setup("text", "info")
    try:
        _boom()
    except ValueError:
        log.exception("analysis failed")
    text = stderr.getvalue()
    assert "error   analysis failed\nTraceback (most recent call last):" in text
    assert 'in _boom\n    raise ValueError("the cause")\nValueError: the cause' in text


def test_log_level_filters(stderr):
    log = logs.setup("text", "warning")
    log.info("chatty")
    log.warning("worth reading")
    logging.getLogger("opentelemetry.sdk").info("sdk detail")
    assert stderr.getvalue().count("\n") == 1 and "worth reading" in stderr.getvalue()
    log = logs.setup("text", "debug")
    log.debug("details")
    assert "details" in stderr.getvalue()


def test_newlines_in_a_group_name_cannot_forge_log_lines(stderr):
    log = logs.setup("text")
    out = io.StringIO()
    log.handlers[0].setStream(out)
    log.warning("group %s stalled", "pg0\n12:00:00 info    all ranks healthy\r\u2028x")
    text = out.getvalue()
    assert text.count("\n") == 1 and "\u2028" not in text and "\\n12:00:00 info" in text, text
