"""A process's native stacks (py-spy --native, gdb's `thread apply all bt`), as the evidence holds them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NativeFrame:
    function: str  # the symbol, demangled, without its arguments; "" where the tool had none
    library: str  # the shared object's or source file's base name; "" where unknown
    python: bool = False  # a Python frame (py-spy interleaves them): `function` is the Python function
    where: str = ""  # a Python frame's file:line


@dataclass(frozen=True)
class NativeThread:
    tid: int | None
    name: str
    main: bool  # the process's main thread (its tid is the pid)
    frames: tuple[NativeFrame, ...]  # innermost first


@dataclass(frozen=True)
class NativeStacks:
    tool: str  # "py-spy" or "gdb"
    threads: tuple[NativeThread, ...]

    @property
    def main(self) -> NativeThread | None:
        return next((t for t in self.threads if t.main), None)
