"""Logging for the daemon: plain text or one JSON object per line, with the rank when there is one.

Everything the process writes to stderr goes through one handler, so `--log-format json` yields
only JSON lines, which log shippers parse: frexport's own logger, the OpenTelemetry SDK's loggers
(exporter failures, retries), any other library through the root logger, Python warnings, and
uncaught exceptions in the main thread or any other thread.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

LOGGER = "frexport"
# Libraries whose own log lines belong in frexport's log: the OTLP exporter reports failed exports and
# retries through these, not through frexport.
_LIBRARY_LOGGERS = ("opentelemetry",)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "msg": record.getMessage(), "rank": getattr(record, "rank", None)}
        if not record.name.startswith(LOGGER):
            out["logger"] = record.name  # a library's line: say whose
        for key in ("source", "kind", "path", "error"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


# Control characters in a message come from input (group names, file names, peers' errors): shown
# escaped, so one record is one line and a name cannot forge the lines after it.
_ESCAPES = {c: f"\\x{c:02x}" for c in range(32) if c != 9} | {10: "\\n", 13: "\\r", 0x7f: "\\x7f",
                                                                0x2028: "\\u2028", 0x2029: "\\u2029"}


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        rank = getattr(record, "rank", None)
        prefix = f"rank {rank}: " if rank is not None else ""
        msg = record.getMessage().translate(_ESCAPES)
        who = "" if record.name.startswith(LOGGER) else f"[{record.name}] "
        line = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname.lower():7} {who}{prefix}{msg}"
        if record.exc_info:  # "analysis failed" is useless without its cause
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(fmt: str = "text", level: str = "info") -> logging.Logger:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    log = logging.getLogger(LOGGER)
    for name in (LOGGER, *_LIBRARY_LOGGERS):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.addHandler(handler)
        lg.propagate = False
    log.setLevel(level.upper())
    # Library lines below a warning are their business, not the on-call engineer's (unless debugging).
    logging.getLogger(_LIBRARY_LOGGERS[0]).setLevel(max(logging.WARNING, log.level) if level != "debug"
                                                     else logging.DEBUG)
    root = logging.getLogger()
    root.handlers.clear()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)  # warnings.warn from any library: a log line, not raw stderr text
    sys.excepthook = _log_uncaught
    threading.excepthook = lambda a: _log_uncaught(a.exc_type, a.exc_value, a.exc_traceback,
                                                   a.thread.name if a.thread else None)
    return log


def _log_uncaught(exc_type, exc, tb, thread: str | None = None) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    where = f" in thread {thread}" if thread else ""
    logging.getLogger(LOGGER).critical("uncaught exception%s", where, exc_info=(exc_type, exc, tb))


def get() -> logging.Logger:
    return logging.getLogger(LOGGER)
