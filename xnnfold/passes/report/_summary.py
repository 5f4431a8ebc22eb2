"""What a lowered program left where: delegates, and the ops that stayed outside them."""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field

from executorch.exir import EdgeProgramManager
from executorch.exir.delegate import executorch_call_delegate

__all__ = ["ProgramSummary", "summarize"]


@dataclass(frozen=True)
class ProgramSummary:
    """Counts for one method of an edge program after lowering."""

    delegates: int
    outside_ops: Counter[str] = field(default_factory=Counter)

    @property
    def fully_delegated(self) -> bool:
        """One delegate and no op left outside it."""
        return self.delegates == 1 and not self.outside_ops

    def outside_ops_text(self) -> str:
        if not self.outside_ops:
            return "none"
        return ", ".join(
            f"{name}" if n == 1 else f"{name} x{n}" for name, n in sorted(self.outside_ops.items())
        )


def _op_name(target: object) -> str:
    # "aten.convolution.default" -> "convolution"
    parts = getattr(target, "__name__", str(target)).split(".")
    return parts[1] if len(parts) >= 3 else parts[0]


def summarize(edge: EdgeProgramManager, method: str = "forward") -> ProgramSummary:
    """Delegates and outside ops of ``method`` of a lowered `EdgeProgramManager`."""
    graph = edge.exported_program(method).graph
    delegates = 0
    outside: Counter[str] = Counter()
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if node.target is executorch_call_delegate:
            delegates += 1
        else:
            outside[_op_name(node.target)] += 1
    return ProgramSummary(delegates, outside)
