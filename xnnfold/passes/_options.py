"""The options that decide what folds, shared by the partitioner and the fold pass.

The partitioner decides at partition time; the fold pass, which the preprocess hook builds
inside executorch, re-checks every decision. Both read one `FoldOptions`: the partitioner
writes the instance it decided with onto each GEMM it marks, and the pass reads it from
there, so an option the user set can never reach one and not the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from xnnfold.passes._ops import DEFAULT_MAX_FOLD_NODES

__all__ = ["FoldOptions"]


@dataclass(frozen=True)
class FoldOptions:
    """What the predicate accepts.

    Attributes:
        max_fold_nodes: the largest weight computation (in nodes) to fold; larger ones
            are declined with a reason.
    """

    max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES

    def __post_init__(self) -> None:
        if not isinstance(self.max_fold_nodes, int) or self.max_fold_nodes < 1:
            raise ValueError(f"max_fold_nodes must be an int >= 1, got {self.max_fold_nodes!r}")
