# Types of the compiled scanner (_scan.c) for mypy; the pure path in scanned.py says what
# the columns hold.
def scan(data: bytes, /) -> tuple | None: ...  # (head, kinds, kind_of, ints, durations, stacks, frames, threads)

def entries_of(template_of: object, kind_of: object, ints: object, durations: object, start: int, stop: int,
            slots: tuple[int, ...], /) -> tuple[list, int]: ...  # (entries, how many refused)

# The constants it was compiled with (_scan_fields.h, generated from fields.py): scanned.expected_fields()
FIELDS: dict
