"""Logging for the daemon: plain text or one JSON object per line, with the rank when there is one."""

from __future__ import annotations

import json
import logging
import sys
import time

LOGGER = "frexport"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "msg": record.getMessage(), "rank": getattr(record, "rank", None)}
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
        line = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname.lower():7} {prefix}{msg}"
        if record.exc_info:  # "analysis failed" is useless without its cause
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(fmt: str = "text", level: str = "info") -> logging.Logger:
    log = logging.getLogger(LOGGER)
    log.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False
    return log


def get() -> logging.Logger:
    return logging.getLogger(LOGGER)
