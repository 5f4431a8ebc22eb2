"""What the folding configs find while they match a GEMM, as a value.

executorch asks a config only for booleans and node lists (``check_constraints``,
``get_partition``), through template methods that take no extra argument. So a config's
`FoldingGEMMMixin.match` runs those methods on a copy of itself that holds a fresh
`FindingsRecord`, and returns what the record gathered, frozen, with the partition: the
record lives for that one call. A matching round merges the GEMMs' findings in program
order (`Findings.merged`), and the fixed point and the outcome read the final round's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from torch.fx import Node

from xnnfold.passes._reason_codes import Problem
from xnnfold.passes.analysis import Rejection, WeightComputation

__all__ = ["Findings", "FindingsRecord", "NO_FINDINGS"]


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Findings:
    """What the configs found for the GEMMs they were asked about.

    Attributes:
        rejections: the computed arguments declined, by (GEMM, argument index); a GEMM
            delegated with a run-time weight has one too.
        correct_alone: of those, the ones declined only to keep the program small, with
            the computation that would be correct to fold.
        argument_problems: GEMMs declined for an argument XNNPACK cannot compute whatever
            the weight, by name.
        shared_folds: GEMMs accepted with a computation shared with other GEMMs' weights.
        folds: GEMMs accepted with folded arguments: {argument index: site}, by name.
        scales: addmm's beta and alpha the fold multiplies in: {argument index: factor}.
        growth: folds that grow the program, made or declined by the budget:
            {argument index: (bytes added, group)}, by GEMM name.
        stored_twice: (GEMM name, argument index, role) folded although their sources
            stay for another reader.
    """

    rejections: Mapping[tuple[Node, int], Rejection] = field(
        default_factory=lambda: MappingProxyType({})
    )
    correct_alone: Mapping[tuple[Node, int], WeightComputation] = field(
        default_factory=lambda: MappingProxyType({})
    )
    argument_problems: Mapping[str, Problem] = field(default_factory=lambda: MappingProxyType({}))
    shared_folds: frozenset[str] = frozenset()
    folds: Mapping[str, Mapping[int, Optional[str]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    scales: Mapping[str, Mapping[int, float]] = field(default_factory=lambda: MappingProxyType({}))
    growth: Mapping[str, Mapping[int, tuple[int, str]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    stored_twice: frozenset[tuple[str, int, str]] = frozenset()

    def merged(self, later: Findings) -> Findings:
        """These findings with ``later``'s added; where both name the same key, the later
        one's value (a GEMM matched again in a round decides as it did last)."""
        return Findings(
            _frozen({**self.rejections, **later.rejections}),
            _frozen({**self.correct_alone, **later.correct_alone}),
            _frozen({**self.argument_problems, **later.argument_problems}),
            self.shared_folds | later.shared_folds,
            _frozen({**self.folds, **later.folds}),
            _frozen({**self.scales, **later.scales}),
            _frozen({**self.growth, **later.growth}),
            self.stored_twice | later.stored_twice,
        )


NO_FINDINGS = Findings()


class FindingsRecord:
    """The findings of one `FoldingGEMMMixin.match` call while it runs (private to it)."""

    def __init__(self) -> None:
        self.rejections: dict[tuple[Node, int], Rejection] = {}
        self.correct_alone: dict[tuple[Node, int], WeightComputation] = {}
        self.argument_problems: dict[str, Problem] = {}
        self.shared_folds: set[str] = set()
        self.folds: dict[str, dict[int, Optional[str]]] = {}
        self.scales: dict[str, dict[int, float]] = {}
        self.growth: dict[str, dict[int, tuple[int, str]]] = {}
        self.stored_twice: set[tuple[str, int, str]] = set()

    def rejected(
        self, gemm: Node, arg_index: int, rejection: Rejection, alone: Optional[WeightComputation]
    ) -> None:
        self.rejections[(gemm, arg_index)] = rejection
        if alone is not None:
            self.correct_alone[(gemm, arg_index)] = alone
        else:
            self.correct_alone.pop((gemm, arg_index), None)

    def accepted(self, gemm: Node, arg_index: int) -> None:
        """The argument is taken after all (a later precision, a later check)."""
        self.rejections.pop((gemm, arg_index), None)
        self.correct_alone.pop((gemm, arg_index), None)

    def grew(self, gemm: Node, arg_index: int, growth: tuple[int, str]) -> None:
        self.growth.setdefault(gemm.name, {})[arg_index] = growth

    def freeze(self) -> Findings:
        return Findings(
            _frozen(self.rejections),
            _frozen(self.correct_alone),
            _frozen(self.argument_problems),
            frozenset(self.shared_folds),
            _frozen({name: _frozen(v) for name, v in self.folds.items()}),
            _frozen({name: _frozen(v) for name, v in self.scales.items()}),
            _frozen({name: _frozen(v) for name, v in self.growth.items()}),
            frozenset(self.stored_twice),
        )
