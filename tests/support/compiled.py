"""Tests that run a compiled helper's caller both ways: with the helper (as the dev setup builds it) and
without it (an install without a compiler), to hold the two to the same results."""

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


@contextmanager
def compiled_or_pure(module: ModuleType, name: str, compiled: bool) -> Iterator[None]:
    """`module.<name>` (the loaded helper, or None without one) as it is built, or None for the pure path."""
    built = getattr(module, name)
    assert built is not None, f"{module.__name__}.{name} is not built (scripts/setup.sh builds it)"
    setattr(module, name, built if compiled else None)
    try:
        yield
    finally:
        setattr(module, name, built)
