"""What the predicate answers about a GEMM argument: a computation to fold, or why not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch.fx import Node

from xnnfold.passes._reason_codes import ReasonCode

__all__ = ["Argument", "Growth", "Rejection", "WeightComputation"]


@dataclass(frozen=True)
class Growth:
    """What folding one group of weight computations (those sharing sources) adds.

    Attributes:
        group: the name of the group's first folded value in program order.
        folded: bytes of the distinct folded tensors.
        freed: bytes of the sources the folds free.
    """

    group: str
    folded: int
    freed: int

    @property
    def added(self) -> int:
        return self.folded - self.freed


@dataclass(frozen=True)
class WeightComputation:
    """A GEMM argument computed from constants, ready to fold.

    Attributes:
        gemm: the GEMM node that consumes the computed tensor.
        arg_index: position of the computed tensor in ``gemm.args``.
        role: ``"weight"`` or ``"bias"``.
        root: the node whose value the GEMM consumes.
        nodes: the computation's call_function nodes in topological order (root last).
        sources: the parameter, buffer and constant placeholders it reads.
        site: the ``prepare_for_xnnpack`` mark (``"<module path>.<tensor>"``), if any.
        shared: intermediates it shares with other GEMMs' weight computations (the
            split of a packed projection); those GEMMs must share its partition.
    """

    gemm: Node
    arg_index: int
    role: str
    root: Node
    nodes: tuple[Node, ...]
    sources: tuple[Node, ...]
    site: Optional[str]
    shared: tuple[Node, ...] = ()
    # What the fold adds to the program, when it grows it (within the growth budget).
    growth: Optional[Growth] = None


@dataclass(frozen=True)
class Rejection:
    """Why a GEMM argument is not folded.

    ``computed_from_constants`` is True when the argument *is* computed from parameters
    only and was declined for safety (sharing, size, budget): that is the case a user
    wants to hear about, as opposed to a GEMM whose weight is an activation.
    """

    gemm: Node
    arg_index: int
    role: str
    reason: str
    computed_from_constants: bool
    site: Optional[str]
    # The rule that decided (XNF5xx, docs/reasons.md).
    code: ReasonCode
    # True when the GEMM must stay exactly as the stock partitioner leaves it (its
    # sources live in an external .ptd): no run-time-weight delegation either.
    keep_stock: bool = False
    # What folding would add to the program (XNF508, XNF516).
    growth: Optional[Growth] = None


@dataclass(frozen=True)
class Argument:
    """The GEMM argument a rule judges."""

    gemm: Node
    arg_index: int
    role: str
    root: Node

    def reject(
        self,
        code: ReasonCode,
        reason: str,
        *,
        from_constants: bool,
        site: Optional[str],
        keep_stock: bool = False,
    ) -> Rejection:
        return Rejection(
            self.gemm,
            self.arg_index,
            self.role,
            reason,
            from_constants,
            site,
            code,
            keep_stock=keep_stock,
        )
