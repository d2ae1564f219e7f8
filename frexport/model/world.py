"""How large a job can be: the bound every rank id and world size is checked against before it sizes
anything (a set of ranks, a range, a per-rank table).

A rank id comes from untrusted bytes (a dump's pg_config, a peer's rows, a file name, a command line);
one value of 1 000 000 000 made the analysis build a set of a billion ranks (13.9 GB). The largest
training jobs run on a few hundred thousand GPUs; a rank id at or above MAX_WORLD is no rank of a real
job: the value (or the member list carrying it) is dropped and said so, never the other ranks.
"""

from __future__ import annotations

MAX_WORLD = 1 << 18  # 262 144 ranks


def is_rank(v: object, world: int | None = None) -> bool:
    """A rank id a job of `world` ranks (else of at most MAX_WORLD) can have."""
    return type(v) is int and 0 <= v < min(world or MAX_WORLD, MAX_WORLD)


def is_world_size(v: object) -> bool:
    return type(v) is int and 0 < v <= MAX_WORLD
