"""What must agree across the ranks of one collective.

A rank's view of a collective is its `OpSignature` (op, sizes, dtypes; a tuple of
them for a coalesced group). Ranks legitimately differ for some ops (all_to_all
splits, the root of scatter/gather), so matching compares a *canonical* form that
blanks what may differ. The rules follow PyTorch's own analyzer (`Op.match`):
input sizes are not compared for all_to_all and scatter, output sizes not for
all_to_all and gather; dtypes are compared as sets, only where tensors exist.
"""

from __future__ import annotations

from typing import NamedTuple

_VARIABLE_SIZE_OPS = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base",
                                "all_gather_v", "reduce_scatter_v"})
_NO_INPUT_SIZE_CHECK = _VARIABLE_SIZE_OPS | {"scatter"}
_NO_OUTPUT_SIZE_CHECK = _VARIABLE_SIZE_OPS | {"gather"}
_NO_INPUT_DTYPE_CHECK = frozenset({"scatter", "broadcast"})
_NO_OUTPUT_DTYPE_CHECK = frozenset({"gather"})


class OpSignature(NamedTuple):
    op: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]

    def describe(self) -> str:
        parts = [self.op]
        if self.input_sizes or self.output_sizes:
            parts.append(f"in {_sizes(self.input_sizes)} {_dtypes(self.input_dtypes)}")
            parts.append(f"out {_sizes(self.output_sizes)} {_dtypes(self.output_dtypes)}")
        return " ".join(parts)


Signature = tuple[OpSignature, ...]  # one per op of a coalesced group; usually one


def canonical(sig: Signature) -> tuple:
    return tuple(_canonical_op(s) for s in sig)


def _canonical_op(s: OpSignature) -> tuple:
    op = s.op.lower()
    return (
        s.op,
        () if op in _NO_INPUT_SIZE_CHECK else s.input_sizes,
        () if op in _NO_OUTPUT_SIZE_CHECK else s.output_sizes,
        () if op in _NO_INPUT_DTYPE_CHECK or not s.input_sizes else tuple(sorted(set(s.input_dtypes))),
        () if op in _NO_OUTPUT_DTYPE_CHECK or not s.output_sizes else tuple(sorted(set(s.output_dtypes))),
    )


def describe(sig: Signature) -> str:
    return " + ".join(s.describe() for s in sig) if sig else "(nothing)"


def op_name(sig: Signature) -> str:
    return sig[0].op if len(sig) == 1 else "coalesced(" + ", ".join(s.op for s in sig) + ")"


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(map(str, s)) + "]" for s in sizes) + "]"


def _dtypes(dtypes: tuple[str, ...]) -> str:
    return "/".join(dtypes) if dtypes else "-"
