# Types of the compiled match (_matching.c) for mypy; analysis/matching.py says what it does.
from types import NotImplementedType

def match_group(cols: dict, group_type: type,
                /) -> tuple[int, list[tuple[int, dict[int, int]]]] | NotImplementedType: ...
