"""The one error type that decoding raises: every bad input becomes a DecodeError."""

from __future__ import annotations


class DecodeError(Exception):
    """A dump could not be read. `reason` is a short machine-friendly tag (for metrics)."""

    def __init__(self, source: str, reason: str, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.source = source
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # keep it picklable across worker processes
        return (DecodeError, (self.source, self.reason, self.detail))
