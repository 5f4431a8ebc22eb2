"""The order in which executorch calls a lowering's partitioners, which the cross-method
constant facts rely on (`xnnfold.passes.partition._facts`): every method's partitioners are
asked ``ops_to_not_decompose`` on the ATen program before any method is partitioned."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.partitioner import PartitionResult
from executorch.exir.delegate import executorch_call_delegate
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import prepare_for_xnnpack
from xnnfold._upstream import EdgeOpOverload, OpOverload
from xnnfold.passes import XnnpackFoldingPartitioner

ASK, CHECK, PARTITION = "ask", "check after lowering", "partition"


def _phase_of_question(ep: ExportedProgram) -> str:
    """An ATen program is asked before decomposition; an edge program (edge ops, or
    delegates already) only in executorch's check after lowering."""
    edge = any(
        isinstance(node.target, EdgeOpOverload) or node.target is executorch_call_delegate
        for node in ep.graph.nodes
    )
    return CHECK if edge else ASK


class _Recording(XnnpackFoldingPartitioner):
    def __init__(self, method: str, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.method, self.log = method, log

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[OpOverload], Optional[Callable[[Node], bool]]]:
        self.log.append((_phase_of_question(ep), self.method))
        return super().ops_to_not_decompose(ep)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        self.log.append((PARTITION, self.method))
        return super().partition(exported_program)


class _Method(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = weight_norm(nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))


def _export(width: int) -> ExportedProgram:
    model: Any = prepare_for_xnnpack(_Method(width).eval())
    return torch.export.export(model, (torch.randn(2, width),))


def test_every_method_is_asked_before_any_is_partitioned() -> None:
    log: list[tuple[str, str]] = []
    to_edge_transform_and_lower(
        {"a": _export(8), "b": _export(4)},
        partitioner={"a": [_Recording("a", log)], "b": [_Recording("b", log)]},
    )
    asked = [i for i, (phase, _) in enumerate(log) if phase == ASK]
    partitioned = [i for i, (phase, _) in enumerate(log) if phase == PARTITION]
    assert {method for phase, method in log if phase == ASK} == {"a", "b"}, log
    assert {method for phase, method in log if phase == PARTITION} == {"a", "b"}, log
    assert max(asked) < min(partitioned), log
