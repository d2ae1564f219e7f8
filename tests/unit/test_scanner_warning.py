"""Without the compiled scanner frexport says so, once, when analyze or serve starts (and `frexport
--version` says which path is in use: tests/unit/test_version.py); with it, nothing is said."""

import json
import logging
import sys
import threading

import pytest

from frexport.cli import serve as serve_cli
from frexport.cli.main import main
from frexport.decode import scanned
from tests.support.paths import REAL_FIXTURES

WHY = "not built (No module named 'frexport.decode._scan'; no C compiler at install time?)"


@pytest.fixture
def pure(monkeypatch):
    monkeypatch.setattr(scanned, "_scan", None)
    monkeypatch.setattr(scanned, "_why_not", WHY)


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.excepthook, threading.excepthook)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    sys.excepthook, threading.excepthook = saved[2], saved[3]
    logging.captureWarnings(False)
    for name in ("frexport", "opentelemetry"):
        logging.getLogger(name).handlers.clear()


def test_the_warning_names_the_reason_and_the_cost(pure):
    line = scanned.pure_path_warning()
    assert line is not None and "\n" not in line
    assert WHY in line and "pure-Python path" in line and "manylinux wheel" in line
    assert scanned.status() == f"no - {WHY}"


def test_no_warning_with_the_scanner(monkeypatch):
    monkeypatch.setattr(scanned, "_scan", lambda data: None)
    assert scanned.pure_path_warning() is None and scanned.status() == "yes"


def test_analyze_warns_once_on_stderr(pure, capsys):
    code = main(["analyze", str(REAL_FIXTURES / "stuck_before_collective"), "--workers", "1",
                 "--allow-no-memory-limit"])
    assert code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "compiled pickle scanner" in line]
    assert lines == [f"frexport analyze: warning: {scanned.pure_path_warning()}"], err


def test_analyze_says_nothing_with_the_scanner(monkeypatch, capsys):
    real = scanned._scan
    monkeypatch.setattr(scanned, "_scan", real or (lambda data: None))
    main(["analyze", str(REAL_FIXTURES / "stuck_before_collective"), "--workers", "1", "--allow-no-memory-limit"])
    assert "compiled pickle scanner" not in capsys.readouterr().err


class _Stop(Exception):
    pass


def test_serve_logs_a_warning_line_at_start(pure, monkeypatch, tmp_path, capsys, restore_logging):
    def stop(cfg):
        raise _Stop  # the warning comes before the sidecar is built: nothing needs to run

    monkeypatch.setattr(serve_cli, "build_sidecar", stop)
    with pytest.raises(_Stop):
        main(["serve", "--sockets-dir", str(tmp_path), "--log-format", "json"])
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if "compiled pickle scanner" in line]
    assert [(d["level"], d["msg"]) for d in lines] == [("warning", scanned.pure_path_warning())], err


def test_jobview_logs_it_too(pure, monkeypatch, capsys, restore_logging):
    """The job view decodes peers' pickles (call sites in its bundles): the same line."""
    from frexport.cli import jobview

    def stop(cfg):
        raise _Stop

    monkeypatch.setattr(jobview, "build_jobview", stop)
    with pytest.raises(_Stop):
        main(["jobview", "--peer", "http://127.0.0.1:1", "--log-format", "json"])
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if "compiled pickle scanner" in line]
    assert [(d["level"], d["msg"]) for d in lines] == [("warning", scanned.pure_path_warning())], err
