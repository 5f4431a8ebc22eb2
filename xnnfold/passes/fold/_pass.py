"""Fold computed GEMM weights into constants of an XNNPACK delegate.

The folding partitioner puts a GEMM and the computation of its weight (weight_norm,
spectral_norm, `W.t()`, ...) into one partition. XNNPACK can only serialize a static
weight, so before the stock XNNPACK passes run, this pass evaluates each such computation
once, with the same ATen kernels eager PyTorch uses, and replaces it by a parameter of the
delegate. Afterwards the delegate looks exactly as if the weight had been a parameter, and
the source parameters (`original0/1`, `weight_g/weight_v`, `weight_orig`) are gone from it.

Only GEMMs that the folding partitioner marked are considered (their `FoldMark`, under
`FOLD_META_KEY`), and each is re-checked here by the same decision ladder the partitioner
used (`decide`, at `Stage.DELEGATE`), with the options the mark carries. Once it has folded,
the pass drops the marks from its program (executorch's private copy): a program with no
marks is left untouched, so a second run reports ``modified=False``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from executorch.exir.pass_base import PassResult
from torch.export import ExportedProgram
from torch.fx import GraphModule, Node

from xnnfold._meta import FOLD_META_KEY, VAL_META_KEY
from xnnfold._upstream import exir_ops, XNNPACKPass
from xnnfold.passes._marks import fold_mark_of, FoldMark, tanh_gelu_mark_of
from xnnfold.passes._ops import EDGE_GEMM_ARGS
from xnnfold.passes.analysis import (
    AnalysisCache,
    computation_key,
    decide,
    is_matrix_transpose,
    new_analysis_cache,
    Stage,
    WeightComputation,
)
from xnnfold.passes.fold._placeholders import ConstantPlaceholders

__all__ = ["FoldComputedWeightsPass", "has_fold_marks"]

_CONVOLUTION = exir_ops.edge.aten.convolution.default
_MATMULS = frozenset({exir_ops.edge.aten.addmm.default, exir_ops.edge.aten.mm.default})
# addmm's scales, which `_apply_scales` multiplies into its constants.
_SCALE_KWARGS = frozenset({"beta", "alpha"})


def has_fold_marks(ep: ExportedProgram) -> bool:
    """True when the partitioner left a mark for preprocess on some op of ``ep``: a
    GEMM's `FoldMark`, or a tanh GELU's `TanhGeluMark`. An input's placeholder is not
    looked at: it inherits the meta of the node it stands for, which may be another
    delegate's marked output."""
    return any(
        fold_mark_of(node) is not None or tanh_gelu_mark_of(node) is not None
        for node in ep.graph.nodes
        if node.op == "call_function"
    )


def _outermost_first(computations: list[WeightComputation]) -> list[WeightComputation]:
    """Order computations so that one holding another's GEMM is folded before it.

    A bias computed as ``mm(a, f(p))`` holds a GEMM whose own weight ``f(p)`` is marked
    too. Folding the inner weight first would rewrite nodes the outer computation still
    lists; folding the outer one first evaluates the inner GEMM eagerly and leaves it
    with no readers, and the inner fold is then skipped. Unnested programs keep their
    order, so their constants (and bytes) do not move."""
    gemms = {c.gemm for c in computations}
    if len(gemms) < 2:
        return computations
    depth: dict[Node, int] = dict.fromkeys(gemms, 0)
    for computation in computations:
        for node in computation.nodes:
            if node in depth and node is not computation.gemm:
                depth[node] += 1
    if not any(depth.values()):
        return computations
    return sorted(computations, key=lambda c: depth[c.gemm])


def _evaluate(computation: WeightComputation, constants: ConstantPlaceholders) -> torch.Tensor:
    """Run the computation eagerly, node by node, with the graph's own ops."""
    env: dict[Node, object] = {source: constants.tensor(source) for source in computation.sources}

    def load(arg: object) -> object:
        return env[arg] if isinstance(arg, Node) else arg

    with torch.no_grad():
        for node in computation.nodes:
            # map_aggregate is typed Argument -> Argument; load maps to evaluated values.
            args = torch.fx.node.map_aggregate(node.args, load)  # type: ignore[arg-type]
            kwargs = torch.fx.node.map_aggregate(node.kwargs, load)  # type: ignore[arg-type]
            env[node] = node.target(*args, **kwargs)  # type: ignore[operator]
    value = env[computation.root]
    if not isinstance(value, torch.Tensor):
        raise RuntimeError(
            f"xnnfold: the {computation.role} of '{computation.gemm.name}' evaluated to "
            f"{type(value).__name__}, expected a tensor"
        )
    expected = computation.root.meta.get(VAL_META_KEY)
    if isinstance(expected, torch.Tensor) and (
        tuple(expected.shape) != tuple(value.shape) or expected.dtype != value.dtype
    ):
        raise RuntimeError(
            f"xnnfold: the folded {computation.role} of '{computation.gemm.name}' has "
            f"shape {tuple(value.shape)} {value.dtype}, the graph expects "
            f"{tuple(expected.shape)} {expected.dtype}"
        )
    return value.detach().contiguous()


def _reshaped_in_place(computation: WeightComputation) -> bool:
    """XNNPACK's Conv1dUnsqueezePass reshapes a 1D convolution's weight constant in
    place, so two 1D convolutions must not share one (stock lowering of a hand-folded
    Conv1d called twice fails on exactly that)."""
    val = computation.root.meta.get(VAL_META_KEY)
    return (
        computation.role == "weight"
        and computation.gemm.target is _CONVOLUTION
        and isinstance(val, torch.Tensor)
        and val.dim() == 3
    )


def _without_final_transpose(computation: WeightComputation) -> Optional[WeightComputation]:
    """An addmm/mm weight ``f(...).t()`` is folded as ``f(...)`` with the transpose kept.

    That is how a hand-folded linear reaches XNNPACK (its decomposition is
    ``addmm(b, x, permute(W))``), and XNNPACK's ConvertToLinearPass turns that back into a
    linear; given an already transposed constant instead it builds a linear of the wrong
    shape. None when the transpose's input is itself a stored tensor (nothing to fold).
    """
    root = computation.root
    if computation.gemm.target not in _MATMULS or not is_matrix_transpose(root):
        return computation
    inner = root.args[0]
    if not isinstance(inner, Node) or inner.op != "call_function":
        return None
    return dataclasses.replace(
        computation, root=inner, nodes=tuple(n for n in computation.nodes if n is not root)
    )


class FoldComputedWeightsPass(XNNPACKPass):
    """Replace each marked GEMM's computed weight or bias by a folded parameter.

    Idempotent: folded arguments are parameters, which the predicate no longer reports,
    and the marks acted on are dropped. Leaves alone every GEMM without the partitioner's
    mark and every node that is not part of a folded computation. Every mark carries the
    `FoldOptions` the partitioner decided with, and the pass re-checks with those.
    """

    def _computations(
        self, marked: dict[Node, FoldMark], cache: AnalysisCache
    ) -> list[WeightComputation]:
        ep = self.exported_program
        found: list[WeightComputation] = []
        for node, mark in marked.items():
            positions = EDGE_GEMM_ARGS.get(node.target) if node.op == "call_function" else None
            if positions is None:
                continue
            for index in mark.folded:
                if index not in positions:
                    continue
                verdict = decide(
                    node,
                    index,
                    ep,
                    arg_positions=positions,
                    options=mark.options,
                    stage=Stage.DELEGATE,
                    cache=cache,
                )
                if verdict is None:
                    continue
                if verdict.computation is None:
                    # The partitioner accepted this computation into the delegate; left
                    # unfolded, its ops would reach the XNNPACK serializer as if they
                    # were part of the model. Never emit that.
                    rejection = verdict.rejection
                    assert rejection is not None  # a verdict other than a fold has one
                    raise RuntimeError(
                        f"xnnfold: the partitioner marked the {rejection.role} of "
                        f"'{node.name}' for folding, but the fold pass declines it: "
                        f"{rejection.reason} [{rejection.code.code}]. Lower this model with "
                        "XnnpackFoldingPartitioner(fold=False) and report the model."
                    )
                if verdict.computation is not None:
                    computation = _without_final_transpose(verdict.computation)
                    if computation is not None:
                        found.append(computation)
        return _outermost_first(found)

    def _fold_one(
        self, computation: WeightComputation, before: Node, constants: ConstantPlaceholders
    ) -> Node:
        """A new constant placeholder holding the computation's value."""
        value = _evaluate(computation, constants)
        base = (computation.site or computation.root.name).replace(".", "_")
        return constants.add(
            before=before, base=f"xnnfold_{base}", value=value, origin=computation.root
        )

    def _apply_scales(
        self,
        gemm: Node,
        scales: tuple[tuple[int, float], ...],
        before: Node,
        constants: ConstantPlaceholders,
    ) -> tuple[Node, list[Node]]:
        """Multiply addmm's beta and alpha into its bias and weight constants.

        Runs after the folds, so each scaled argument is a constant placeholder or the
        final transpose of one (`_without_final_transpose`). Returns the new first
        placeholder and the sources no longer read.
        """
        graph = self.exported_program.graph
        dead: list[Node] = []
        for index, factor in scales:
            arg = gemm.args[index]
            transpose = arg if isinstance(arg, Node) and is_matrix_transpose(arg) else None
            stored = transpose.args[0] if transpose is not None else arg
            if not isinstance(stored, Node) or stored.op != "placeholder":
                raise RuntimeError(
                    f"xnnfold: argument {index} of '{gemm.name}' must be a constant to "
                    f"take its scale {factor:g}, found {stored}"
                )
            value = constants.tensor(stored)
            with torch.no_grad():
                # beta == 0 means the bias is ignored, NaN and inf included (addmm's rule).
                scaled = torch.zeros_like(value) if factor == 0 else value * factor
            constant = constants.add(
                before=before,
                base=f"xnnfold_{stored.name}_scaled",
                value=scaled.contiguous(),
                origin=stored,
            )
            before = constant
            if transpose is not None:
                with graph.inserting_before(gemm):
                    replacement = graph.call_function(
                        transpose.target, (constant, *transpose.args[1:]), transpose.kwargs
                    )
                replacement.meta = dict(transpose.meta)
                gemm.update_arg(index, replacement)
                if not transpose.users:
                    graph.erase_node(transpose)
            else:
                gemm.update_arg(index, constant)
            if not stored.users:
                dead.append(stored)
        gemm.kwargs = {k: v for k, v in gemm.kwargs.items() if k not in _SCALE_KWARGS}
        return before, dead

    def call(self, graph_module: GraphModule) -> PassResult:
        ep = self.exported_program
        graph = graph_module.graph
        marked = {node: mark for node in graph.nodes if (mark := fold_mark_of(node)) is not None}
        # One call's constant maps, swept before anything is rewritten: the stage ends
        # with the rewrite.
        cache = new_analysis_cache()
        computations = self._computations(marked, cache)
        scaled = [
            node for node, mark in marked.items() if node.op == "call_function" and mark.scales
        ]
        if not computations and not scaled:
            return PassResult(graph_module, False)

        first_input = next(n for n in graph.nodes if n.op == "placeholder")
        # Keyed before anything is rewritten: a module called twice computes its weight
        # twice from the same sources, and both calls get the one folded constant.
        memo: dict[Node, object] = {}
        keys = [
            (
                computation_key(c, memo, ep, cache=cache),
                c.gemm if _reshaped_in_place(c) else None,
            )
            for c in computations
        ]
        folded_by_key: dict[object, Node] = {}
        removed: set[Node] = set()
        constants = ConstantPlaceholders(ep)
        dead_sources: list[Node] = []
        for computation, key in zip(computations, keys):
            if computation.gemm in removed:
                # An enclosing computation evaluated this GEMM as part of its value.
                continue
            folded = folded_by_key.get(key)
            if folded is None:
                folded = self._fold_one(computation, first_input, constants)
                folded_by_key[key] = first_input = folded
            computation.root.replace_all_uses_with(folded)
            # Computations may share nodes (a split feeding several GEMMs, one weight
            # read by two GEMMs): each node goes once its last reader has been folded.
            for node in reversed(computation.nodes):
                if node not in removed and not node.users:
                    graph.erase_node(node)
                    removed.add(node)
            for source in computation.sources:
                if source not in removed and not source.users:
                    constants.release(source)
                    dead_sources.append(source)
                    removed.add(source)

        for gemm in scaled:
            if gemm in removed:
                continue  # evaluated, scales and all, inside an enclosing computation
            first_input, dead = self._apply_scales(
                gemm, marked[gemm].scales, first_input, constants
            )
            dead_sources.extend(n for n in dead if n not in removed)
            removed.update(dead)
        for gemm in marked:
            if gemm not in removed:
                # Acted on. A new dict, not an in-place pop: fx copies meta shallowly, so
                # the dict may be shared with another program's node.
                gemm.meta = {k: v for k, v in gemm.meta.items() if k != FOLD_META_KEY}

        constants.delete(dead_sources)
        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)
