# Types of the compiled scanner (_scan.c) for mypy; the pure path in scanned.py says what
# the columns hold.
def scan(data: bytes, /) -> tuple | None: ...  # (head, kinds, kind_of, ints, durations, stacks, frames, threads)

# The constants it was compiled with (_scan_fields.h, generated from fields.py): scanned.expected_fields()
FIELDS: dict
