"""Which folds may grow the program, and by how much (`GrowthBudget`).

A fold replaces a weight computation by its value. Usually that frees at least what it
stores; a computation that broadcasts a small source (``filter.expand(C, -1, -1)``,
``kernel.repeat(C, 1, 1, 1)``) stores more than it frees. Declining it costs little when
the GEMM has a run-time-weight form: XNNPACK's fully-connected op reads an fp32 weight the
program computes, so the GEMM stays delegated (XNF508). A convolution has no such form:
declined, it runs on the portable kernels together with its weight computation, ten times
slower or more, to save a few kilobytes. Such a fold may grow the program within the
budget; beyond it the GEMM is declined with XNF516.

The folds that share sources count together, as one group (a source expanded a hundred
times costs what the hundred folded tensors take, less the source). The groups of one
method are admitted in program order while each stays within ``max_fold_bytes`` and
their total within ``max_program_fraction`` of the method's parameters and buffers.
That decision is one `Ledger` per method, built once from every GEMM of the graph, so the
ATen plan and the edge configs, asking about any one GEMM, read the same verdicts. The
fold pass re-checks with the same options inside one delegate, which holds part of the
method's parameters: a fold the budget declines there was admitted on the whole method,
and the pass folds it (`FoldComputedWeightsPass`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_symbols

from xnnfold._meta import VAL_META_KEY
from xnnfold._upstream import aten_op_of, EdgeOpOverload, OpOverload, schema_of
from xnnfold.passes._ops import FULLY_CONNECTED_WEIGHT
from xnnfold.passes._options import GrowthBudget, NO_GROWTH
from xnnfold.passes._reason_codes import BEYOND_BUDGET
from xnnfold.passes.analysis._arguments import addmm_scales
from xnnfold.passes.analysis._nodes import constant_tensor
from xnnfold.passes.analysis._results import Growth, Rejection, WeightComputation

__all__ = [
    "Growth",
    "Ledger",
    "admit",
    "budget_text",
    "growth_of",
    "has_run_time_weight_form",
    "node_bytes",
    "noted_growth",
    "gemm_op_name",
    "program_bytes",
    "program_cap",
    "restated_beyond_budget",
]


def has_run_time_weight_form(gemm: Node, *, op_name: str, role: str) -> bool:
    """Whether XNNPACK takes ``gemm`` with this argument computed at run time, as the
    decision ladder delegates a declined fold (`_verdict.decide`): the fp32 weight
    of a fully-connected GEMM without addmm's scales. A convolution, a bias, a weight of
    another dtype or a scaled addmm has none: declined, the GEMM stays on portable."""
    position = FULLY_CONNECTED_WEIGHT.get(op_name)
    if position is None or role != "weight":
        return False
    if op_name == "addmm" and addmm_scales(gemm):
        return False
    weight = gemm.args[position] if position < len(gemm.args) else None
    val = weight.meta.get(VAL_META_KEY) if isinstance(weight, Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def program_bytes(ep: ExportedProgram) -> int:
    """Bytes of ``ep``'s parameters and buffers: the reference of the relative cap. The
    same in the ATen and the edge program (lifted scalars, which to_edge adds, are not
    counted), so both decide alike."""
    signature = ep.graph_signature
    total = 0
    for fqn in (*signature.parameters, *signature.buffers):
        tensor = constant_tensor(ep, fqn)
        if tensor is not None:
            total += tensor.numel() * tensor.element_size()
    return total


def budget_text(budget: GrowthBudget) -> str:
    """The budget as a user would write it."""
    if budget == NO_GROWTH:
        return "NO_GROWTH"
    return (
        f"GrowthBudget(max_fold_bytes={budget.max_fold_bytes}, "
        f"max_program_fraction={budget.max_program_fraction:g})"
    )


@dataclass(frozen=True)
class Ledger:
    """The verdicts on the growing folds of one method.

    Attributes:
        budget: the budget they were admitted under.
        program_bytes: the method's parameters and buffers.
        verdicts: group -> None (admitted) or why it is beyond the budget.
    """

    budget: GrowthBudget
    program_bytes: int
    verdicts: dict[str, Optional[str]]

    @property
    def program_cap(self) -> int:
        return program_cap(self.budget, self.program_bytes)

    def verdict(self, growth: Growth) -> Optional[str]:
        """None when ``growth``'s group is admitted, else why not. A group the ledger did
        not see (measured under other assumptions) is judged alone against both caps."""
        if growth.group in self.verdicts:
            return self.verdicts[growth.group]
        return _over_budget(growth.added, self.budget, self.program_bytes, used=0)


def program_cap(budget: GrowthBudget, program: int) -> int:
    """The most all growing folds of a method may add: ``max_program_fraction`` of its
    ``program`` bytes, and never less than one fold may add (a model of a few kilobytes
    is not held to a few bytes)."""
    return max(budget.max_fold_bytes, int(budget.max_program_fraction * program))


def _over_budget(added: int, budget: GrowthBudget, program: int, *, used: int) -> Optional[str]:
    if not budget.allows_growth:
        return f"growth_budget is {budget_text(budget)}"
    if added > budget.max_fold_bytes:
        return f"one fold may add at most {budget.max_fold_bytes} bytes"
    cap = program_cap(budget, program)
    if used + added > cap:
        return (
            f"the folds of this method may add {cap} bytes in all (the larger of "
            f"max_fold_bytes and {budget.max_program_fraction:.4g} of its {program} bytes "
            f"of parameters and buffers), and earlier folds left {cap - used}"
        )
    return None


def admit(growths: Iterable[Growth], budget: GrowthBudget, program: int) -> Ledger:
    """Admit ``growths`` in the order given (program order), each while it fits: within
    ``max_fold_bytes`` alone and within what earlier admitted groups left of the
    method's cap. A group seen twice is judged once."""
    verdicts: dict[str, Optional[str]] = {}
    used = 0
    for growth in growths:
        if growth.group in verdicts:
            continue
        why = _over_budget(growth.added, budget, program, used=used)
        if why is None:
            used += growth.added
        verdicts[growth.group] = why
    return Ledger(budget, program, verdicts)


def node_bytes(node: Node, float_itemsize: Optional[int] = None) -> Optional[int]:
    """Bytes of ``node``'s value, or None for a dynamic shape; with ``float_itemsize``, a
    floating-point value counts as if stored at that element size (integer data keeps its
    own: int8 is compression)."""
    val = node.meta.get(VAL_META_KEY)
    if not isinstance(val, torch.Tensor) or free_symbols(val):
        return None
    if float_itemsize is not None and val.dtype.is_floating_point:
        return val.numel() * float_itemsize
    return val.numel() * val.element_size()


def gemm_op_name(target: object) -> str:
    """ "convolution" for aten.convolution in any dialect (and the copies executorch keeps
    out of decomposition under another namespace while it decomposes)."""
    if isinstance(target, EdgeOpOverload):
        target = aten_op_of(target)
    if isinstance(target, OpOverload):
        return schema_of(target).name.split("::")[-1]
    return ""


def growth_of(result: Union[WeightComputation, Rejection, None]) -> Optional[Growth]:
    """The growth ``result`` carries when its GEMM may spend budget on it: one without a
    run-time-weight form (`has_run_time_weight_form`)."""
    if result is None or result.growth is None:
        return None
    gemm = result.gemm
    if has_run_time_weight_form(gemm, op_name=gemm_op_name(gemm.target), role=result.role):
        return None
    return result.growth


def restated_beyond_budget(rejection: Rejection, ledger: Ledger) -> Optional[Rejection]:
    """The size rules' ``rejection``, judged by the growth budget's ``ledger``.

    Unchanged unless it is a fold that grows the program (XNF508) of a GEMM without a
    run-time-weight form. Then None when the ledger admits its group: the fold goes
    ahead. Otherwise the rejection restated as XNF516, naming the bytes, the budget and
    the option.
    """
    growth = growth_of(rejection)
    if growth is None:
        return rejection
    why = ledger.verdict(growth)
    if why is None:
        return None
    reason = (
        f"folding would grow the program by {growth.added} bytes (the folded "
        f"{rejection.role} and the folds sharing its sources take {growth.folded} bytes and "
        f"free {growth.freed}), beyond the growth budget: {why}; raise "
        f"XnnpackFoldingPartitioner(growth_budget=...) (now {budget_text(ledger.budget)}) "
        "to fold it"
    )
    return dataclasses.replace(rejection, code=BEYOND_BUDGET, reason=reason)


def noted_growth(result: Union[WeightComputation, Rejection, None]) -> Optional[tuple[int, str]]:
    """What `explain` shows for a fold that grows the program: (bytes added, group) for
    a fold admitted within the budget (``result`` a computation) or one the budget
    declined (XNF516); None otherwise."""
    if result is None or result.growth is None:
        return None
    if isinstance(result, Rejection) and result.code is not BEYOND_BUDGET:
        return None
    return (result.growth.added, result.growth.group)
