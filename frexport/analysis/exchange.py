"""What must hold for a collective whose members legitimately send different amounts (all_to_all).

Uneven splits are normal (a mixture of experts routes different token counts to each rank), so
all_to_all is not judged by the odd one out. What must hold is conservation: everything the
members send is received by some member, so the members' input totals equal their output totals.
Flight Recorder records each rank's whole input and output shapes (not the split sizes), which is
exactly enough to check that sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from frexport.model.signature import Signature

EXCHANGE_OPS = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base"})


@dataclass(frozen=True)
class Imbalance:
    sent: int  # elements, summed over members
    received: int
    per_rank: tuple[tuple[int, int, int], ...]  # (rank, elements sent, elements received)

    def text(self) -> str:
        return (f"the members send {self.sent} elements in all but receive {self.received}: "
                f"their split sizes disagree")

    def details(self) -> tuple[str, ...]:
        return tuple(f"rank {r} sends {s} elements, receives {v}" for r, s, v in self.per_rank)


def imbalance(sigs: dict[int, Signature]) -> Imbalance | None:
    """`sigs`: every member's signature of one collective. None when it holds, or cannot be judged."""
    if not sigs or any(len(sig) != 1 or sig[0].op.lower() not in EXCHANGE_OPS for sig in sigs.values()):
        return None
    per_rank = []
    for r, (s,) in sorted(sigs.items()):
        per_rank.append((r, sum(prod(shape) for shape in s.input_sizes), sum(prod(shape) for shape in s.output_sizes)))
    sent, received = sum(x[1] for x in per_rank), sum(x[2] for x in per_rank)
    return None if sent == received else Imbalance(sent, received, tuple(per_rank))
