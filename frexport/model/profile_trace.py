"""A PyTorch profiler trace reduced to what the report compares: the host-side events of each thread."""

from __future__ import annotations

from dataclasses import dataclass

# Chrome-trace categories of host-side work in PyTorch's traces: ops, record_function labels (the
# DataLoader's `enumerate(DataLoader)#...__next__`, a collective's `gloo:all_reduce`) and Python calls
HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function")


@dataclass(frozen=True)
class HostEvent:
    tid: int
    cat: str
    name: str
    ts_us: float
    dur_us: float


@dataclass(frozen=True)
class ProfileTrace:
    events: tuple[HostEvent, ...]
    span_us: float  # from the first event's start to the last event's end
    dropped: int = 0  # events over the cap, not read
