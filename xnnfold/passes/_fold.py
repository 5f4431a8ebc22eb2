"""Fold computed GEMM weights into constants of an XNNPACK delegate.

The folding partitioner puts a GEMM and the computation of its weight (weight_norm,
spectral_norm, `W.t()`, ...) into one partition. XNNPACK can only serialize a static
weight, so before the stock XNNPACK passes run, this pass evaluates each such computation
once, with the same ATen kernels eager PyTorch uses, and replaces it by a parameter of the
delegate. Afterwards the delegate looks exactly as if the weight had been a parameter, and
the source parameters (`original0/1`, `weight_g/weight_v`, `weight_orig`) are gone from it.

Only GEMMs that the folding partitioner marked (`FOLD_META_KEY`) are considered, and each is
re-checked here with the same predicate the partitioner used; a program with no marks is
left untouched, so a second run reports ``modified=False``.
"""

from __future__ import annotations

from typing import Optional

import torch
from executorch.backends.transforms.utils import (
    create_constant_placeholder,
    delete_constant_placeholder,
)
from executorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult
from torch._export.utils import (
    get_buffer,
    get_lifted_tensor_constant,
    get_param,
    is_buffer,
    is_param,
)
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import GraphModule, Node

from xnnfold.passes._constants import (
    DEFAULT_MAX_FOLD_NODES,
    EDGE_GEMM_ARGS,
    FOLD_META_KEY,
)
from xnnfold.passes._predicates import (
    computation_key,
    find_weight_computation,
    WeightComputation,
)

__all__ = ["FoldComputedWeightsPass", "has_fold_marks"]

_CONVOLUTION = exir_ops.edge.aten.convolution.default


def has_fold_marks(ep: ExportedProgram) -> bool:
    """True when some GEMM of ``ep`` was marked for folding by the partitioner."""
    return any(FOLD_META_KEY in node.meta for node in ep.graph.nodes)


def _source_tensor(ep: ExportedProgram, node: Node) -> torch.Tensor:
    if is_param(ep, node):
        tensor = get_param(ep, node)
    elif is_buffer(ep, node):
        tensor = get_buffer(ep, node)
    else:
        tensor = get_lifted_tensor_constant(ep, node)
    if tensor is None:
        raise RuntimeError(
            f"xnnfold: no data for constant '{node.name}' in the delegate's program"
        )
    return tensor


def _evaluate(ep: ExportedProgram, computation: WeightComputation) -> torch.Tensor:
    """Run the computation eagerly, node by node, with the graph's own ops."""
    env: dict[Node, object] = {
        source: _source_tensor(ep, source) for source in computation.sources
    }

    def load(arg: object) -> object:
        return env[arg] if isinstance(arg, Node) else arg

    with torch.no_grad():
        for node in computation.nodes:
            args = torch.fx.node.map_aggregate(node.args, load)
            kwargs = torch.fx.node.map_aggregate(node.kwargs, load)
            env[node] = node.target(*args, **kwargs)  # type: ignore[operator]
    value = env[computation.root]
    if not isinstance(value, torch.Tensor):
        raise RuntimeError(
            f"xnnfold: the {computation.role} of '{computation.gemm.name}' evaluated to "
            f"{type(value).__name__}, expected a tensor"
        )
    expected = computation.root.meta.get("val")
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
    val = computation.root.meta.get("val")
    return (
        computation.role == "weight"
        and computation.gemm.target is _CONVOLUTION
        and isinstance(val, torch.Tensor)
        and val.dim() == 3
    )


def _unique_name(ep: ExportedProgram, base: str) -> str:
    taken = {node.name for node in ep.graph.nodes} | set(ep.state_dict) | set(
        ep.constants
    )
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


class FoldComputedWeightsPass(XNNPACKPass):
    """Replace each marked GEMM's computed weight or bias by a folded parameter.

    Idempotent: folded arguments are parameters, which the predicate no longer reports.
    Leaves alone every GEMM without the partitioner's mark and every node that is not part
    of a folded computation.
    """

    def __init__(
        self,
        exported_program: ExportedProgram,
        *,
        max_fold_nodes: int = DEFAULT_MAX_FOLD_NODES,
    ) -> None:
        super().__init__(exported_program)
        self.max_fold_nodes = max_fold_nodes

    def _computations(self) -> list[WeightComputation]:
        ep = self.exported_program
        found: list[WeightComputation] = []
        for node in ep.graph.nodes:
            marks: Optional[dict[int, Optional[str]]] = node.meta.get(FOLD_META_KEY)
            if node.op != "call_function" or not marks:
                continue
            positions = EDGE_GEMM_ARGS.get(node.target)
            if positions is None:
                continue
            for index in marks:
                if index not in positions:
                    continue
                result = find_weight_computation(
                    node,
                    index,
                    ep,
                    arg_positions=positions,
                    max_nodes=self.max_fold_nodes,
                )
                if isinstance(result, WeightComputation):
                    found.append(result)
        return found

    def _fold_one(self, computation: WeightComputation, before: Node) -> Node:
        """A new constant placeholder holding the computation's value."""
        ep = self.exported_program
        value = _evaluate(ep, computation)
        base = (computation.site or computation.root.name).replace(".", "_")
        with ep.graph.inserting_before(before):
            folded = create_constant_placeholder(
                ep,
                ep.graph,
                _unique_name(ep, f"xnnfold_{base}"),
                InputKind.PARAMETER,
                value,
            )
        folded.meta.update(
            {
                k: v
                for k, v in computation.root.meta.items()
                if k in ("custom", "nn_module_stack", "stack_trace")
            }
        )
        return folded

    def call(self, graph_module: GraphModule) -> PassResult:
        ep = self.exported_program
        graph = graph_module.graph
        computations = self._computations()
        if not computations:
            return PassResult(graph_module, False)

        first_input = next(n for n in graph.nodes if n.op == "placeholder")
        # Keyed before anything is rewritten: a module called twice computes its weight
        # twice from the same sources, and both calls get the one folded constant.
        memo: dict[Node, object] = {}
        keys = [
            (computation_key(c, memo), c.gemm if _reshaped_in_place(c) else None)
            for c in computations
        ]
        folded_by_key: dict[object, Node] = {}
        removed: set[Node] = set()
        for computation, key in zip(computations, keys):
            folded = folded_by_key.get(key)
            if folded is None:
                folded = self._fold_one(computation, first_input)
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
                    delete_constant_placeholder(ep, source)
                    removed.add(source)
            # A new dict, not an in-place pop: fx copies meta shallowly, so the dict may
            # be shared with the top-level program's node.
            remaining = {
                index: site
                for index, site in computation.gemm.meta.get(FOLD_META_KEY, {}).items()
                if index != computation.arg_index
            }
            if remaining:
                computation.gemm.meta[FOLD_META_KEY] = remaining
            else:
                computation.gemm.meta.pop(FOLD_META_KEY, None)

        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)
