"""When executorch can keep a partitioner's ops out of decomposition without a per-node filter.

`to_edge_transform_and_lower` has two ways to keep the ops a partitioner asks for. With a
per-node filter (what the stock XNNPACK partitioner returns) it decomposes the program
twice more: once with the kept ops left out of the table, once more after wrapping the
instances the filter accepts in the EDGE_DO_NOT_DECOMP namespace, then unwraps them.
Without a filter it keeps every instance and decomposes at most once. On a model whose
weights are computed (the HiFi-GAN fixture), those two extra passes over the larger graph
are most of what lowering costs beyond lowering the hand-folded model.

The two ways give the same program when the filter would accept every instance it is
shown. `filter_is_redundant` proves that from the program the partitioner is asked about:
every kept op already in the graph is accepted (and not one executorch would refuse to
keep), and nothing else the decompositions rewrite can produce a kept op. The folding
partitioner then returns no filter; otherwise it returns its filter and nothing changes.

The stock part of that filter (`stock_ops_to_not_decompose`) asks configs the partitioner
built for the question, and every op the partitioner keeps is marked (`mark_preserved`).
The mark is how partitioning learns which nodes of the edge program were kept for a fold
(`kept_for_folds`): executorch's decompositions rename the nodes they keep
(``_weight_norm_3`` becomes ``aten__weight_norm_default_3``) and copy only
``node.meta["custom"]`` onto them, and an op alone does not tell a node kept for a fold
from one a stock config kept. The partitioner reads it once per call and hands the names
on as data: to the configs, for the decision ladder, and to the check that each kept node
landed in a delegate.
"""

from __future__ import annotations

import functools
from typing import Callable, Collection, Mapping

from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
    PartitionerConfig,
)
from executorch.exir.graph_module import get_control_flow_submodules
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import CUSTOM_META_KEY, PRESERVED_META_KEY
from xnnfold._upstream import default_decomposition_table, OpOverload, optional_internal
from xnnfold.passes._ops import DECOMPOSES_ONLY_TO
from xnnfold.passes.analysis import op_overload

__all__ = [
    "decomposed_ops",
    "filter_is_redundant",
    "kept_for_folds",
    "mark_preserved",
    "stock_ops_to_not_decompose",
]


@functools.lru_cache(maxsize=1)
def decomposed_ops() -> frozenset[OpOverload]:
    """The ops of the table `to_edge_transform_and_lower` decomposes with."""
    return frozenset(op for op in default_decomposition_table() if isinstance(op, OpOverload))


def _kept_by_executorch(ops: Collection[OpOverload]) -> bool:
    """True when executorch's filter path would keep every op in ``ops`` (it drops ops
    that alias their output or break in the EDGE_DO_NOT_DECOMP namespace; the path
    without a filter does not)."""
    if not ops:
        return True
    remove_invalid = optional_internal("remove_invalid_ops_for_not_decompose")
    if remove_invalid is None:  # without it, nothing can be proven
        return False
    return set(remove_invalid(list(ops))) == set(ops)


def filter_is_redundant(
    ep: ExportedProgram,
    ops: Collection[OpOverload],
    accepts: Callable[[Node], bool],
) -> bool:
    """True when keeping every instance of ``ops`` gives the program that keeping only
    the instances ``accepts`` admits would give.

    Pure: reads ``ep`` and calls ``accepts``, changes nothing.
    """
    if get_control_flow_submodules(ep.graph_module):
        # Decompositions inside branches and loop bodies are not worth proving here.
        return False
    kept = set(ops)
    decomposed = decomposed_ops()
    present: set[OpOverload] = set()
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        op = op_overload(node.target)
        if op is None:
            continue
        if op in kept:
            if not accepts(node):
                return False
            present.add(op)
        elif op in decomposed:
            produced = DECOMPOSES_ONLY_TO.get(op)
            if produced is None or not produced.isdisjoint(kept):
                # Its decomposition could create an instance the filter never judged.
                return False
    return _kept_by_executorch(present)


def mark_preserved(node: Node) -> None:
    """Mark ``node`` as kept undecomposed by the folding partitioner."""
    # Recorded in "custom", the one meta dict the decompositions carry over.
    custom = dict(node.meta.get(CUSTOM_META_KEY) or {})
    custom[PRESERVED_META_KEY] = True
    node.meta[CUSTOM_META_KEY] = custom


def kept_for_folds(ep: ExportedProgram) -> frozenset[str]:
    """Names of the nodes of ``ep``'s graph the folding partitioner kept undecomposed
    for a fold (`mark_preserved`)."""
    found: set[str] = set()
    for node in ep.graph.nodes:
        custom = node.meta.get(CUSTOM_META_KEY)
        if isinstance(custom, dict) and custom.get(PRESERVED_META_KEY):
            found.add(node.name)
    return frozenset(found)


def stock_ops_to_not_decompose(
    configs: Mapping[str, PartitionerConfig], ep: ExportedProgram
) -> tuple[list[OpOverload], Callable[[Node], bool]]:
    """`ConfigerationBasedPartitioner.ops_to_not_decompose` with ``configs``: each
    config's original ATen op, and a filter asking that config's ``check_constraints``."""

    def filter_fn(node: Node) -> bool:
        if node.op != "call_function":
            return False
        config = configs.get(format_target_name(node.target.__name__))  # type: ignore[union-attr]
        if config is None or not config.get_original_aten():
            return False
        return config.check_constraints(node, ep)

    ops = [op for config in configs.values() if (op := config.get_original_aten()) is not None]
    return ops, filter_fn
