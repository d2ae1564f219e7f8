# Types of the compiled rows' appender (_rows.c) for mypy; rank_trace.append_entries says what it does.
from types import NotImplementedType

def setup(fields: tuple[int, ...], op_signature: type, p2p_op: type, new_tuple: object, started: int, finished: int,
          issued: int, p2p: int, column: int, /) -> None: ...
def append(entries: tuple, start: int, first_row: int, groups: dict, outcome_flags: dict, site_index: dict,
           call_sites: list, sig_index: dict, signatures: list, sigs: dict, heads: dict, names: list,
           kinds: bytearray, sites: bytearray, /) -> int: ...
def first_unsettled(entries: tuple | list, start: int, stop: int, state_at: int, retired_at: int, completed: str,
                    /) -> int | None | NotImplementedType: ...
