"""What the partitioner leaves on a node: the one fold mark and the one reason.

executorch hands XNNPACK preprocess the delegate's program and nothing else, so what the
partitioner decided for a node reaches preprocess only on the node, under `FOLD_META_KEY`:
one frozen value, validated when it is built, as torchao's pt2e quantizer writes one
annotation per node. On a GEMM it is a `FoldMark` (what the fold pass folds); on a tanh
GELU that the installed serializer would write as exact GELU, a `TanhGeluMark` (the GELU
pass writes it as the tanh formula). Why a GEMM stays outside a
delegate, or takes its weight at run time, is read back by `explain` from the lowered
program (`GemmReason`, under `REASON_META_KEY`). Each has one writer, the partitioner,
after its final matching round (`passes/partition/_outcome.py`); nothing in partitioning
reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch.fx import Node

from xnnfold._meta import FOLD_META_KEY, REASON_META_KEY
from xnnfold.passes._options import FoldOptions

__all__ = [
    "FoldMark",
    "GemmReason",
    "FoldGrowth",
    "TanhGeluMark",
    "fold_mark_of",
    "reason_of",
    "tanh_gelu_mark_of",
]

# (argument index, bytes its fold adds to the program, the name of the group of folds
# that share its sources): a fold that grows the program (docs/growth-budget.md).
FoldGrowth = tuple[int, int, str]


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_growth(owner: str, growth: object) -> None:
    if not isinstance(growth, tuple) or not all(
        isinstance(entry, tuple)
        and len(entry) == 3
        and _is_index(entry[0])
        and _is_index(entry[1])
        and isinstance(entry[2], str)
        for entry in growth
    ):
        raise TypeError(
            f"{owner}.growth must be a tuple of (argument index, bytes, group) with "
            f"non-negative ints and a str group, got {growth!r}"
        )


@dataclass(frozen=True)
class FoldMark:
    """What the partitioner decided for one GEMM it delegated with something to fold.

    Attributes:
        options: the `FoldOptions` it decided with; the fold pass re-checks each fold
            with exactly these.
        arguments: (argument index, ``prepare_for_xnnpack`` site or None) of each
            computed argument to fold, in the order the partitioner found them (the fold
            pass folds in this order, which fixes the order of the new constants).
        scales: (argument index, factor) of addmm's beta and alpha other than 1, which
            the fold pass multiplies into the bias and weight constants.
        growth: the folds among ``arguments`` that grow the program (`FoldGrowth`), for
            `explain`.
    """

    options: FoldOptions
    arguments: tuple[tuple[int, Optional[str]], ...] = ()
    scales: tuple[tuple[int, float], ...] = ()
    growth: tuple[FoldGrowth, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.options, FoldOptions):
            raise TypeError(
                f"FoldMark.options must be a FoldOptions, got {type(self.options).__name__}"
            )
        if not isinstance(self.arguments, tuple) or not all(
            isinstance(entry, tuple)
            and len(entry) == 2
            and _is_index(entry[0])
            and (entry[1] is None or isinstance(entry[1], str))
            for entry in self.arguments
        ):
            raise TypeError(
                "FoldMark.arguments must be a tuple of (argument index, site or None), "
                f"got {self.arguments!r}"
            )
        if not isinstance(self.scales, tuple) or not all(
            isinstance(entry, tuple)
            and len(entry) == 2
            and _is_index(entry[0])
            and isinstance(entry[1], (int, float))
            and not isinstance(entry[1], bool)
            for entry in self.scales
        ):
            raise TypeError(
                f"FoldMark.scales must be a tuple of (argument index, factor), got {self.scales!r}"
            )
        _check_growth("FoldMark", self.growth)
        folded = [index for index, _ in self.arguments]
        if len(set(folded)) != len(folded) or len({i for i, _ in self.scales}) != len(self.scales):
            raise ValueError(f"FoldMark names an argument twice: {self!r}")
        if not folded and not self.scales:
            raise ValueError("FoldMark asks for nothing: no argument to fold and no scale")
        if any(index not in folded for index, _, _ in self.growth):
            raise ValueError(
                f"FoldMark.growth names an argument that is not folded: {self.growth!r}"
            )

    @property
    def folded(self) -> tuple[int, ...]:
        """The indices of the arguments to fold, in order."""
        return tuple(index for index, _ in self.arguments)


@dataclass(frozen=True)
class TanhGeluMark:
    """On a delegated ``gelu(approximate="tanh")``: preprocess computes it as the tanh
    formula from nodes the serializer writes exactly (`ExactTanhGeluPass`), since the
    installed serializer would write it as exact GELU. Carries nothing: the formula is
    fixed, and the GELU's own arguments say the rest."""


@dataclass(frozen=True)
class GemmReason:
    """Why a GEMM stays outside every delegate, or why a delegated GEMM's computed
    weight is taken at run time instead of folded.

    Attributes:
        text: the reason, as `explain` prints it.
        code: the stable code of the rule that decided (XNF5xx, docs/reasons.md).
        growth: for a GEMM the growth budget left outside (XNF516), what its folds would
            have added (`FoldGrowth`); empty otherwise.
    """

    text: str
    code: str
    growth: tuple[FoldGrowth, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not isinstance(self.code, str):
            raise TypeError(f"GemmReason takes a str text and code, got {self!r}")
        _check_growth("GemmReason", self.growth)


def fold_mark_of(node: Node) -> Optional[FoldMark]:
    """``node``'s fold mark, or None (a value of another type under the key is none)."""
    mark = node.meta.get(FOLD_META_KEY)
    return mark if isinstance(mark, FoldMark) else None


def tanh_gelu_mark_of(node: Node) -> Optional[TanhGeluMark]:
    """``node``'s tanh GELU mark, or None."""
    mark = node.meta.get(FOLD_META_KEY)
    return mark if isinstance(mark, TanhGeluMark) else None


def reason_of(node: Node) -> Optional[GemmReason]:
    """``node``'s reason, or None."""
    reason = node.meta.get(REASON_META_KEY)
    return reason if isinstance(reason, GemmReason) else None
