"""The partitioner's decision before decomposition: which ops to keep, which GEMMs won't fold.

executorch asks a partitioner which ATen ops to keep out of decomposition before it
partitions the edge program. A kept op must then land in a delegate (an undelegated
`_weight_norm` has no portable kernel), so the ops of a weight computation are kept only
for a GEMM the edge configs will take with every argument; and a GEMM that will not fold
keeps its computed arguments' sources, which another GEMM's fold must not then drop.
`aten_plan` answers both on the ATen program: whether an argument folds is the decision
ladder's verdict (`decide`, at `Stage.ATEN`), as on the edge program; whether the edge
configs will take the GEMM at all is predicted here, from the ATen forms of XNNPACK's
dtype, rank and shape checks and the argument rules (`aten_gemm_delegable`,
`argument_problem`), since on the edge program executorch's own configs decide that.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, cast, MutableMapping, Optional, Sequence

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import has_free_unbacked_symbols

from xnnfold._meta import VAL_META_KEY
from xnnfold._upstream import OpOverload, schema_of
from xnnfold.passes._node_arguments import argument
from xnnfold.passes._ops import (
    ATEN_GEMM_ARGS,
    CONVOLUTION_TARGETS,
    FULLY_CONNECTED_GEMMS,
    PRESERVE_BLOCKLIST,
)
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import Problem
from xnnfold.passes.analysis import (
    addmm_problem,
    AnalysisCache,
    constant_computation,
    decide,
    deconvolution_problem,
    input_dependent,
    is_constant_source,
    is_float32,
    op_overload,
    ProgramFacts,
    shared_kernel_problem,
    Stage,
    WeightComputation,
)
from xnnfold.passes.partition._configs import (
    FoldingAddmmConfig,
    FoldingConvolutionConfig,
    FoldingLinearConfig,
    FoldingMMConfig,
)
from xnnfold.passes.partition._decompositions import decomposed_ops
from xnnfold.passes.partition._rank import over_rank

__all__ = [
    "AtenPlan",
    "PlanCache",
    "aten_plan",
    "keepable",
]


def keepable(op: OpOverload) -> bool:
    """Ops executorch can keep out of decomposition (no mutation, no aliasing, one
    output: `_remove_invalid_ops_for_not_decompose` drops multi-output ops such as
    `var_mean` with an "aliases output" warning, so asking for them only adds noise)."""
    if op in PRESERVE_BLOCKLIST or op not in decomposed_ops():
        return False
    schema = schema_of(op)
    return (
        not schema.is_mutable and len(schema.returns) == 1 and schema.returns[0].alias_info is None
    )


# The folding config that takes each ATen GEMM whose weight ops are kept, by its
# ``target_name`` (executorch's key for a config): the partitioner's configs may leave one
# out (``configs=[ConvolutionConfig]``), and a kept op nothing delegates has no kernel.
_CONFIG_OF: dict[object, str] = {
    **{op: FoldingConvolutionConfig.target_name for op in CONVOLUTION_TARGETS},
    torch.ops.aten.linear.default: FoldingLinearConfig.target_name,
    torch.ops.aten.addmm.default: FoldingAddmmConfig.target_name,
    torch.ops.aten.mm.default: FoldingMMConfig.target_name,
    # A matmul the plan keeps ops for has a 2D weight: it decomposes to an mm.
    torch.ops.aten.matmul.default: FoldingMMConfig.target_name,
}


def shapes_rejected(node: Node) -> bool:
    """XNNPACK's common input check (every config's ``_check_inputs_are_valid_dtypes``):
    a GEMM reading a tensor of data-dependent size (an unbacked symbol, ``x[:n.item()]``)
    or with no elements is never delegated, whatever its weight."""
    values = [arg.meta.get(VAL_META_KEY) for arg in node.all_input_nodes]
    values.append(node.meta.get(VAL_META_KEY))
    # Unbacked first: the size of such a tensor cannot be compared without a guard error.
    return any(
        isinstance(value, torch.Tensor) and (has_free_unbacked_symbols(value) or value.numel() == 0)
        for value in values
    )


def aten_gemm_delegable(
    node: Node, *, force_non_static_weights: bool, configs: frozenset[str]
) -> bool:
    """The ATen-level part of the XNNPACK GEMM checks that a computed weight can't pass.

    Keeping an op undecomposed is only safe if its GEMM is then delegated: an undelegated
    `_weight_norm` would need a portable kernel that does not exist. With
    ``force_non_static_weights_for_f32_linear`` the fully-connected GEMMs take their fp32
    weights at run time and never fold them. ``configs``: the ``target_name`` of each
    folding config the partitioner has.
    """
    if force_non_static_weights and node.target in FULLY_CONNECTED_GEMMS:
        return False
    if _CONFIG_OF.get(node.target) not in configs:
        return False
    if shapes_rejected(node) or over_rank(node):
        # Over XNNPACK's rank, the GEMM's group is left out (`within_xnnpack_rank`).
        return False
    weight = node.args[ATEN_GEMM_ARGS[node.target][0]]
    if not isinstance(weight, Node) or not is_float32(weight):
        return False
    rank = weight.meta[VAL_META_KEY].dim()
    activation = node.args[1] if node.target is torch.ops.aten.addmm.default else node.args[0]
    if not is_float32(activation):
        return False
    if node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return rank == 2
    act = cast(Node, activation).meta[VAL_META_KEY]  # is_float32: a Node
    if node.target in (torch.ops.aten.matmul.default, torch.ops.aten.linear.default):
        # On a non-contiguous batched activation (x.movedim(1, -1)) torch decomposes both
        # into expand + bmm, and executorch does not keep the linear: nothing would take
        # the kept weight ops.
        if act.dim() > 2 and not act.is_contiguous():
            return False
        min_act_rank = 2 if node.target is torch.ops.aten.matmul.default else 1
        return rank == 2 and act.dim() >= min_act_rank
    return rank in (3, 4)  # convolutions: XNNPACK takes 1D and 2D


def argument_problem(
    node: Node,
    *,
    force_non_static_weights: bool,
    constant_or_foldable: Callable[[int], bool],
) -> Optional[Problem]:
    """The edge configs' argument rules (`_arguments`), on an ATen GEMM."""
    target = node.target
    if target in CONVOLUTION_TARGETS:
        problem = shared_kernel_problem(node, 1)
        if problem is not None:
            return problem
    if target is torch.ops.aten.addmm.default:
        return addmm_problem(
            node,
            fold=True,
            force_non_static_weights=force_non_static_weights,
            constant_or_foldable=constant_or_foldable,
        )
    if target is torch.ops.aten.convolution.default:
        return deconvolution_problem(
            transposed=bool(node.args[6]),
            stride=cast(Sequence[int], node.args[3]),
            output_padding=cast(Sequence[int], node.args[7]),
        )
    if target in _ATEN_DECONVOLUTIONS:
        return deconvolution_problem(
            transposed=True,
            stride=_spatial(argument(node, 3, "stride", 1)),
            output_padding=_spatial(argument(node, 5, "output_padding", 0)),
        )
    return None


def _spatial(value: object) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [int(value)]  # type: ignore[call-overload]


_ATEN_DECONVOLUTIONS = frozenset(
    {torch.ops.aten.conv_transpose1d.default, torch.ops.aten.conv_transpose2d.input}
)


@dataclass(frozen=True)
class AtenPlan:
    """What the ATen program's GEMMs will do, by node name (a Node refers to its graph
    and would keep the weak key below, its program, alive): the ops of foldable weight computations
    that must be kept from decomposition, and the GEMMs that will not fold, whose
    computed weights and biases therefore keep reading their sources."""

    preserved: dict[str, OpOverload]
    not_folding: frozenset[str]


# One stage's plans by program, owned by the caller (one partitioner, which starts a new
# cache at each of executorch's calls, as it does its `AnalysisCache`): (key, plan).
PlanCache = MutableMapping[ExportedProgram, tuple[object, AtenPlan]]


def aten_plan(
    ep: ExportedProgram,
    options: FoldOptions,
    *,
    force_non_static_weights: bool,
    configs: frozenset[str],
    facts: ProgramFacts,
    cache: AnalysisCache,
    plans: Optional[PlanCache] = None,
) -> AtenPlan:
    """The nodes of foldable weight computations whose op the decompositions would
    change (the decision ladder folds them, with the other methods' ``facts``), and the
    GEMMs the edge configs will not fold. With ``force_non_static_weights`` no
    fully-connected weight or bias folds (the stock configs take them at run time then).
    ``configs`` names the folding configs the partitioner has (``target_name``): a GEMM
    none of them takes keeps no op. ``cache`` keeps the ladder's sweeps of the graph;
    ``plans`` (a weak mapping the caller owns, for one stage in which ``ep`` is not
    edited) the last plan per program, reused while the arguments are unchanged."""
    graph = ep.graph
    key = (
        options,
        force_non_static_weights,
        configs,
        facts,
    )
    cached = plans.get(ep) if plans is not None else None
    if cached is not None and cached[0] == key:
        return cached[1]
    preserved: dict[str, OpOverload] = {}
    not_folding: set[str] = set()
    # Swept once, and only when a GEMM declines an argument.
    run_time = functools.cache(lambda: input_dependent(ep, facts.written_buffers))
    for node in graph.nodes:
        positions = ATEN_GEMM_ARGS.get(node.target) if node.op == "call_function" else None
        if positions is None:
            continue
        if not aten_gemm_delegable(
            node, force_non_static_weights=force_non_static_weights, configs=configs
        ):
            # Not in itself a verdict on folding (a matmul of a 1-D activation becomes an
            # mm the edge configs may still fold): only its ops are not kept.
            if never_folds(node, force_non_static_weights=force_non_static_weights) and any(
                constant_computation(ep, node, i, cache=cache) for i in positions
            ):
                not_folding.add(node.name)
            continue
        computations = _folded_computations(
            ep, node, positions, options=options, facts=facts, cache=cache
        )
        constant_or_foldable = functools.partial(
            _constant_or_foldable, ep, node, computations, facts.written_buffers, cache
        )
        # Ops are kept only for a GEMM the edge configs will then take with every
        # argument in its partition: a kept op outside a delegate has no kernel at all.
        # (Fully-connected GEMMs under force_non_static_weights were turned away above: a
        # convolution takes its bias as without the flag, see FoldingConvolutionConfig.)
        declined = [i for i in positions if not constant_or_foldable(i)]
        if declined or argument_problem(
            node,
            force_non_static_weights=force_non_static_weights,
            constant_or_foldable=constant_or_foldable,
        ):
            if _keeps_sources(ep, node, positions, declined, run_time(), cache):
                not_folding.add(node.name)
            continue
        preserved.update(_kept_ops(computations))
    plan = AtenPlan(preserved, frozenset(not_folding))
    if plans is not None:
        plans[ep] = (key, plan)
    return plan


def _folded_computations(
    ep: ExportedProgram,
    gemm: Node,
    positions: tuple[int, ...],
    *,
    options: FoldOptions,
    facts: ProgramFacts,
    cache: AnalysisCache,
) -> dict[int, Optional[WeightComputation]]:
    """{argument index: the computation the decision ladder folds, or None} of ``gemm``."""
    computations: dict[int, Optional[WeightComputation]] = {}
    for index in positions:
        verdict = decide(
            gemm,
            index,
            ep,
            arg_positions=positions,
            options=options,
            stage=Stage.ATEN,
            facts=facts,
            cache=cache,
        )
        computations[index] = verdict.computation if verdict is not None else None
    return computations


def _constant_or_foldable(
    ep: ExportedProgram,
    gemm: Node,
    computations: dict[int, Optional[WeightComputation]],
    written_buffers: frozenset[str],
    cache: AnalysisCache,
    index: int,
) -> bool:
    """Whether ``gemm``'s argument ``index`` is absent, a constant, or a computation that
    folds (``computations``)."""
    arg = gemm.args[index] if index < len(gemm.args) else None
    if arg is None:
        return True
    if isinstance(arg, Node) and arg.op == "placeholder":
        return is_constant_source(ep, arg, written_buffers, cache=cache)
    return computations[index] is not None


def _keeps_sources(
    ep: ExportedProgram,
    gemm: Node,
    positions: tuple[int, ...],
    declined: list[int],
    run_time: set[Node],
    cache: AnalysisCache,
) -> bool:
    """Whether ``gemm``, which does not fold its ``declined`` arguments (none: an argument
    problem declines it whole), leaves constant computations reading their sources.

    The edge configs apply the same argument and computation rules: this GEMM will not
    fold its declined arguments, so their constant computations keep their sources. (Not
    its other arguments: a quantized GEMM's weight is declined here, a dequantize, and
    the edge configs still fold its bias.) An argument computed at run time where a
    constant is needed (an addmm's residual bias) leaves the whole GEMM on portable: every
    constant computation it reads keeps its sources. ``run_time``: the nodes computed at
    run time (`input_dependent`)."""
    whole = not declined or any(
        isinstance(arg, Node) and arg in run_time
        for arg in (gemm.args[i] for i in declined if i < len(gemm.args))
    )
    return any(
        constant_computation(ep, gemm, i, cache=cache) for i in (positions if whole else declined)
    )


def _kept_ops(computations: dict[int, Optional[WeightComputation]]) -> dict[str, OpOverload]:
    """{node name: op} of the folded computations' nodes the decompositions would
    change: what executorch must keep for the fold to evaluate eager's kernels."""
    kept: dict[str, OpOverload] = {}
    for computation in computations.values():
        for member in computation.nodes if computation is not None else ():
            op = op_overload(member.target)
            if op is not None and keepable(op):
                kept[member.name] = op
    return kept


def never_folds(node: Node, *, force_non_static_weights: bool) -> bool:
    """The ATen GEMMs no edge config folds: fully-connected ones whose weights are taken
    at run time, convolutions XNNPACK does not take (3D), and a matmul on a
    non-contiguous batched activation (decomposed to expand + bmm, whose operands are
    not folded; a linear there still folds), and GEMMs XNNPACK declines for their
    shapes (`shapes_rejected`)."""
    if force_non_static_weights and node.target in FULLY_CONNECTED_GEMMS:
        return True
    if shapes_rejected(node):
        return True
    weight = node.args[ATEN_GEMM_ARGS[node.target][0]]
    if not isinstance(weight, Node) or not isinstance(weight.meta.get(VAL_META_KEY), torch.Tensor):
        return False
    if node.target in CONVOLUTION_TARGETS:
        return weight.meta[VAL_META_KEY].dim() not in (3, 4)
    if node.target is torch.ops.aten.matmul.default:
        act = node.args[0].meta.get(VAL_META_KEY) if isinstance(node.args[0], Node) else None
        return isinstance(act, torch.Tensor) and act.dim() > 2 and not act.is_contiguous()
    return False
