"""No delegate whose output XNNPACK's passes turn into a pass-through.

XNNPACK's clone config takes only a no-op ``_clone_dim_order`` (the output's dim order is
the input's), and XNNPACK preprocess removes every such clone
(`XNNPACKRemoveCloneOpsTransform`). When the clone is an output of its delegate and its
input is another output of it, the delegate's outputs then name a value twice, and preprocess stops: "Output node '...' is already in the inputs.
This is likely due to pass through arguments, which are not supported in XNNPACK
Delegate". transformers' UnivNetModel, with the stock partitioner and weight_norm, has
one: a partition holding a ``leaky_relu`` its convolution (left on portable) reads, and
the clone of it that another convolution reads.

`without_pass_through` takes such clones out of their partitions (every clone of such a
value: one taken out reads the value, which then is an output): a no-op copy runs on the
portable kernels, where it costs a copy. Nothing depends on the clone inside its
partition (it is taken out only when every user is outside), so no cycle appears.
"""

from __future__ import annotations

from typing import Callable, cast

from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
)
from torch.fx import Node
from torch.fx.passes.infra.partitioner import Partition

__all__ = ["REMOVED_CLONES", "pass_through_clones", "without_pass_through"]

# The target names of the clones preprocess removes when they change no dim order (the
# only ones XNNPACK's configs take).
REMOVED_CLONES = frozenset({"_clone_dim_order.default", "clone.default"})


def _is_removed_clone(node: Node) -> bool:
    if node.op != "call_function" or not hasattr(node.target, "__name__"):
        return False
    name = cast(Callable[..., object], node.target).__name__
    return format_target_name(name) in REMOVED_CLONES


def _is_output(node: Node, members: set[Node]) -> bool:
    return any(user not in members for user in node.users)


def pass_through_clones(nodes: list[Node]) -> list[Node]:
    """The clones of ``nodes`` (one partition) that preprocess would make a second output
    of one value: outputs of the partition, read only outside it, of a value computed in
    the partition that is an output itself or has another such clone. (A
    clone of a partition input is kept by preprocess, and left alone here.)"""
    members = set(nodes)
    by_source: dict[Node, list[Node]] = {}
    for node in nodes:
        if not _is_removed_clone(node) or not node.all_input_nodes:
            continue
        if any(user in members for user in node.users):
            continue
        source = node.all_input_nodes[0]
        if source in members:
            by_source.setdefault(source, []).append(node)
    found = []
    for source, clones in by_source.items():
        # All of them: a clone taken out reads the source, which becomes an output.
        if _is_output(source, members) or len(clones) > 1:
            found += clones
    return found


def without_pass_through(partitions: list[Partition]) -> list[Partition]:
    """``partitions`` without the clones `pass_through_clones` finds; a partition left
    empty goes. ``partitions`` itself when there is none, so every other program
    partitions exactly as before."""
    dropped = {id(p): set(pass_through_clones(list(p.nodes))) for p in partitions}
    if not any(dropped.values()):
        return partitions
    kept: list[Partition] = []
    for partition in partitions:
        nodes = [n for n in partition.nodes if n not in dropped[id(partition)]]
        if nodes:
            kept.append(Partition(id=len(kept), nodes=nodes))
    return kept
