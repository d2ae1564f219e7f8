# Types of the compiled scanner (_scan.c) for mypy; the pure paths in scanned.py and json_scan.py say what
# the columns hold.
def scan(data: bytes, /) -> tuple | None: ...  # (head, kinds, kind_of, ints, durations, stacks, frames, threads)
def cut_json(data: bytes, start: int, end: int, spaced: bool, /) -> tuple[list, list[int], dict] | None: ...

# The constants it was compiled with (_scan_fields.h, generated from fields.py): scanned.expected_fields()
FIELDS: dict
