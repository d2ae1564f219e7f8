"""Where below Python a rank waits: the innermost frame of its main thread in torch's libraries.

A rank stuck in a collective shows a Python stack ending at the call (`dist.all_reduce`); its native
stack says what it waits in (`c10d::Work::wait`, a gloo transport's `waitRecv`, an NCCL call, a CUDA
synchronisation). The rule: walk the main thread from the innermost frame, past the wait primitives
(libc, pthread, futex, std::condition_variable, sleeps and polls); the first frame left is the one the
rank waits in, named when it belongs to torch (libtorch*, libc10*, gloo, NCCL, CUDA runtimes) and
otherwise the rank is not waiting in torch (the interpreter, its own extension) and nothing is said.
"""

from __future__ import annotations

from dataclasses import dataclass

from frexport.model.native_stack import NativeFrame, NativeStacks

_PRIMITIVE_LIBS = ("libc.so", "libc-", "libpthread", "libstdc++", "ld-linux", "libgcc_s", "futex-internal.c",
                   "pthread_cond_wait.c", "clock_nanosleep.c", "lowlevellock", "syscall-template.S",
                   "clone3.S", "pthread_create.c")
_PRIMITIVE_NAMES = ("__futex", "futex", "pthread_cond", "___pthread", "__pthread", "__GI_", "std::condition_variable",
                    "std::__condvar", "std::this_thread", "clock_nanosleep", "nanosleep", "__lll_", "poll", "epoll_",
                    "select", "syscall", "sched_yield", "usleep", "sleep", "read", "recv", "__libc_")
_TORCH_LIBS = ("libtorch", "libc10", "libgloo", "libnccl", "librccl", "libcudart", "libcuda.so", "_C.",
               "libshm", "libtorch_python")
_TORCH_NAMES = ("c10d::", "gloo::", "c10::", "at::", "torch::", "nccl", "cuda", "ProcessGroup")


@dataclass(frozen=True)
class NativeWait:
    frame: str  # the torch frame the main thread waits in
    library: str
    primitive: str  # the wait primitive under it ("pthread_cond_wait"), "" where none
    python: str  # the innermost Python frame above it, where the tool shows one ("all_reduce (...:3252)")

    def text(self) -> str:
        under = f", in {self.primitive}" if self.primitive else ""
        above = f" under {self.python}" if self.python else ""
        return f"{self.frame} ({self.library}{under}){above}"


def native_wait(stacks: NativeStacks) -> NativeWait | None:
    """The torch frame the main thread waits in, or None (no main thread, not waiting in torch)."""
    main = stacks.main
    if main is None:
        return None
    primitive = ""
    for i, f in enumerate(main.frames):
        if f.python:
            return None  # Python itself is what runs (py-spy puts no native frame below it)
        if _primitive(f):
            short = _short(f.function) if f.function else ""
            if short and (not primitive or short.startswith("pthread_")):
                primitive = short  # the outermost pthread call (the one people know), over futex internals
            continue
        if not _torch(f):
            return None
        python = next((g for g in main.frames[i + 1:] if g.python), None)
        return NativeWait(f.function, f.library, primitive, f"{python.function} ({python.where})" if python else "")
    return None


def _primitive(f: NativeFrame) -> bool:
    if not f.function:
        return f.library.startswith(_PRIMITIVE_LIBS) or not f.library
    return f.library.startswith(_PRIMITIVE_LIBS) or f.function.startswith(_PRIMITIVE_NAMES)


def _torch(f: NativeFrame) -> bool:
    return f.library.startswith(_TORCH_LIBS) or any(n in f.function for n in _TORCH_NAMES)


def _short(name: str) -> str:
    """glibc's internal spellings as people know them: ___pthread_cond_wait -> pthread_cond_wait."""
    name = name.lstrip("_")
    for prefix in ("GI_", "GI___"):
        if name.startswith(prefix):
            name = name[len(prefix):].lstrip("_")
    return name
