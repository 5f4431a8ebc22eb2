"""The options that decide what folds, shared by the partitioner and the fold pass.

The partitioner decides at partition time; the fold pass, which the preprocess hook builds
inside executorch, re-checks every decision. Both read one `FoldOptions`: the partitioner
writes the instance it decided with onto each GEMM it marks, and the pass reads it from
there, so an option the user set can never reach one and not the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from xnnfold.passes._ops import DEFAULT_MAX_FOLD_NODES

__all__ = ["DEFAULT_GROWTH_BUDGET", "FoldOptions", "GrowthBudget", "NO_GROWTH"]


@dataclass(frozen=True)
class GrowthBudget:
    """How many bytes folds may add to a program when their GEMM would otherwise stay on
    the portable kernels (a convolution, whose weight XNNPACK only takes as a constant).

    A fold usually frees at least what it stores (weight_norm's ``g`` and ``v`` are as
    large as the weight). One that broadcasts a small source (``kernel.expand(C, ...)``)
    stores more; it may still fold while both caps hold. Folds that share a source count
    together, as one fold.

    Attributes:
        max_fold_bytes: the most one fold (the folds sharing its sources, together) may
            add.
        max_program_fraction: the most all such folds of one method may add together,
            as a fraction of the bytes of its parameters and buffers (and never less
            than ``max_fold_bytes``). Folds are admitted in program order while the
            total holds.
    """

    max_fold_bytes: int
    max_program_fraction: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_fold_bytes, bool)
            or not isinstance(self.max_fold_bytes, int)
            or self.max_fold_bytes < 0
        ):
            raise ValueError(
                f"GrowthBudget.max_fold_bytes must be an int >= 0, got {self.max_fold_bytes!r}"
            )
        fraction = self.max_program_fraction
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not math.isfinite(fraction)
            or fraction < 0
        ):
            raise ValueError(
                f"GrowthBudget.max_program_fraction must be a finite number >= 0, got {fraction!r}"
            )

    @property
    def allows_growth(self) -> bool:
        return self.max_fold_bytes > 0


# No fold may grow the program: every fold that would is declined (the upstream design).
NO_GROWTH: Final = GrowthBudget(max_fold_bytes=0, max_program_fraction=0.0)
# 64 KiB per fold, 5% of the parameters and buffers in all (docs/growth-budget.md says why).
DEFAULT_GROWTH_BUDGET: Final = GrowthBudget(max_fold_bytes=64 * 1024, max_program_fraction=0.05)


@dataclass(frozen=True)
class FoldOptions:
    """What the predicate accepts.

    Attributes:
        max_fold_nodes: the largest weight computation (in nodes) to fold; larger ones
            are declined with a reason.
        growth_budget: the bytes folds whose GEMM has no run-time-weight form may add to
            the program (`GrowthBudget`).
    """

    max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES
    growth_budget: GrowthBudget = DEFAULT_GROWTH_BUDGET

    def __post_init__(self) -> None:
        if not isinstance(self.max_fold_nodes, int) or self.max_fold_nodes < 1:
            raise ValueError(f"max_fold_nodes must be an int >= 1, got {self.max_fold_nodes!r}")
        if not isinstance(self.growth_budget, GrowthBudget):
            raise TypeError(
                "growth_budget must be a xnnfold.GrowthBudget (or NO_GROWTH, "
                f"DEFAULT_GROWTH_BUDGET), got {type(self.growth_budget).__name__}"
            )
