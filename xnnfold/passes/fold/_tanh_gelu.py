"""Compute tanh GELU exactly inside an XNNPACK delegate whose serializer has no tanh GELU.

executorch 1.5.1's XNNPACK serializer writes every ``aten.gelu`` as XNNPACK's GELU, which
is exact GELU: ``approximate="tanh"`` is dropped, and a delegated tanh GELU computes up to
4.7e-4 off an element, which deep models amplify (docs/limits.md). Later serializers
write it as XNNPACK's approximate GELU, a node a 1.5.1 runtime does not know.

So the folding partitioner marks each tanh GELU it delegates where the installed
serializer would write it wrongly (`TanhGeluMark`), and this pass, first in XNNPACK
preprocess, replaces it by

    gelu_tanh(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3)))      k = sqrt(2 / pi)
                 = x sigmoid(2k x + 2k 0.044715 x^3)
                 = x * sigmoid(x * (A + B * x^2))              A = 2k, B = 2k 0.044715

(``0.5 (1 + tanh(z)) = sigmoid(2z)``): a square, three multiplies, an add and a sigmoid,
the fewest nodes the 1.5.1 serializer writes as they are and its runtime runs, with A and
B two constants of the delegate (viewed as [1, 1, 1, 1] for a 4-D GELU, so that one in
XNNPACK's channels-last region stays there: `_channels_last_operands`). Nothing else in
the delegate changes, the top-level program is not rewritten, and no delegate is split.
Exact GELU keeps stock's serialization.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Final

import torch
from executorch.exir.pass_base import PassResult
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, TensorArgument
from torch.fx import GraphModule, Node

from xnnfold._meta import FOLD_META_KEY, VAL_META_KEY
from xnnfold._upstream import exir_ops, serializes_tanh_gelu, set_graph_signature, XNNPACKPass
from xnnfold.passes._marks import tanh_gelu_mark_of
from xnnfold.passes._node_arguments import argument
from xnnfold.passes.fold._placeholders import ConstantPlaceholders

__all__ = [
    "ExactTanhGeluPass",
    "TANH_GELU_A",
    "TANH_GELU_B",
    "delegated_tanh_gelus",
    "needs_exact_tanh_gelu",
]

_GELU: Final = exir_ops.edge.aten.gelu.default
_MUL: Final = exir_ops.edge.aten.mul.Tensor
# pow(x, 2): XNNPACK's square, one read of x where mul(x, x) is two.
_POW: Final = exir_ops.edge.aten.pow.Tensor_Scalar
_ADD: Final = exir_ops.edge.aten.add.Tensor
_SIGMOID: Final = exir_ops.edge.aten.sigmoid.default
_VIEW: Final = exir_ops.edge.aten.view_copy.default
# The rank XNNPACK's layout pass may run channels-last, and a constant's shape there.
_CHANNELS_LAST_RANK: Final = 4
_SCALAR_4D: Final = (1, 1, 1, 1)
_TANH: Final = "tanh"
# GELU's ``approximate``: its second positional argument, or a keyword.
_APPROXIMATE: Final = "approximate"

# The formula's two constants, in double precision before they are stored as float32.
TANH_GELU_A: Final = 2.0 * math.sqrt(2.0 / math.pi)
TANH_GELU_B: Final = TANH_GELU_A * 0.044715


def _approximate(node: Node) -> object:
    return argument(node, 1, _APPROXIMATE, "none")


def needs_exact_tanh_gelu(node: Node) -> bool:
    """Whether ``node`` is an fp32 ``gelu(approximate="tanh")`` that the installed XNNPACK
    serializer would write as exact GELU. (The stock GELU config delegates fp32 alone.)"""
    if node.op != "call_function" or node.target is not _GELU or _approximate(node) != _TANH:
        return False
    val = node.meta.get(VAL_META_KEY)
    return (
        isinstance(val, torch.Tensor) and val.dtype == torch.float32 and not serializes_tanh_gelu()
    )


def delegated_tanh_gelus(ep: ExportedProgram, delegated: AbstractSet[str]) -> frozenset[str]:
    """The names of the nodes of ``delegated`` (partitioned, by name) that need the exact
    formula (`needs_exact_tanh_gelu`): what the partitioner marks."""
    return frozenset(
        node.name
        for node in ep.graph.nodes
        if node.name in delegated and needs_exact_tanh_gelu(node)
    )


def _rank(node: Node) -> int:
    return len(node.meta[VAL_META_KEY].shape)


def _channels_last_operands(graph: torch.fx.Graph, a: Node, b: Node) -> tuple[Node, Node]:
    """``a`` and ``b`` viewed as [1, 1, 1, 1], for the GELUs of a 4-D activation.

    XNNPACK's layout pass (`ChannelsLastTaggedReshapePass`) keeps a channels-last
    activation's multiply channels-last only where each operand is 4-D and not a
    constant it tagged channels-first: a [1]-shaped constant makes it copy the activation
    to channels-first and back around each GELU, and a [1, 1, 1, 1] constant is tagged
    channels-first. A view of the constant is neither: the pass converts the view (one
    element) and leaves the activation where it is. The view is not folded before the
    layout pass (executorch's constant propagation folds no op on a parameter)."""
    first = next(node for node in graph.nodes if node.op != "placeholder")
    views = []
    with graph.inserting_before(first):
        for constant in (a, b):
            view = graph.call_function(_VIEW, (constant, list(_SCALAR_4D)))
            view.meta = {VAL_META_KEY: constant.meta[VAL_META_KEY].reshape(_SCALAR_4D)}
            views.append(view)
    return views[0], views[1]


class ExactTanhGeluPass(XNNPACKPass):
    """Replace each marked tanh GELU by ``x * sigmoid(x * (A + B * x^2))``.

    Acts only on GELUs the partitioner marked (`TanhGeluMark`); the two constants are
    added once per program, for all of its GELUs. Idempotent: the GELUs it replaces are
    gone, so a second run finds no mark and reports ``modified=False``.
    """

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        marked = [node for node in graph.nodes if tanh_gelu_mark_of(node) is not None]
        if not marked:
            return PassResult(graph_module, False)
        for node in marked:
            if not needs_exact_tanh_gelu(node):
                raise RuntimeError(
                    f"xnnfold: '{node.name}' is marked to be computed as tanh GELU but is "
                    f"{node.target} with approximate={_approximate(node)!r} on "
                    f"{getattr(node.meta.get(VAL_META_KEY), 'dtype', None)}; expected an fp32 "
                    "gelu(approximate='tanh'). Lower with the stock XnnpackPartitioner and "
                    "report the model."
                )
        constants = ConstantPlaceholders(self.exported_program)
        first_input = next(n for n in graph.nodes if n.op == "placeholder")
        b = constants.add(
            before=first_input,
            base="xnnfold_tanh_gelu_b",
            value=torch.tensor([TANH_GELU_B], dtype=torch.float32),
            origin=marked[0],
        )
        a = constants.add(
            before=b,
            base="xnnfold_tanh_gelu_a",
            value=torch.tensor([TANH_GELU_A], dtype=torch.float32),
            origin=marked[0],
        )
        # A 4-D GELU may run in XNNPACK's channels-last region: its constants are viewed
        # as [1, 1, 1, 1] there (`_channels_last_operands`).
        operands = (
            {_CHANNELS_LAST_RANK: _channels_last_operands(graph, a, b)}
            if any(_rank(gelu) == _CHANNELS_LAST_RANK for gelu in marked)
            else {}
        )
        renamed = {
            gelu.name: self._replace(graph, gelu, *operands.get(_rank(gelu), (a, b))).name
            for gelu in marked
        }
        self._rename_outputs(renamed)
        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)

    def _rename_outputs(self, renamed: dict[str, str]) -> None:
        """Point the signature's outputs at the nodes that replaced the GELUs they named."""
        signature = self.exported_program.graph_signature
        specs = [
            dataclasses.replace(spec, arg=TensorArgument(name=renamed[spec.arg.name]))
            if isinstance(spec.arg, TensorArgument) and spec.arg.name in renamed
            else spec
            for spec in signature.output_specs
        ]
        if specs != list(signature.output_specs):
            set_graph_signature(
                self.exported_program, ExportGraphSignature(signature.input_specs, specs)
            )

    @staticmethod
    def _replace(graph: torch.fx.Graph, gelu: Node, a: Node, b: Node) -> Node:
        """Replace ``gelu`` by the formula; returns the node computing its value."""
        x = gelu.args[0]
        meta = {k: v for k, v in gelu.meta.items() if k != FOLD_META_KEY}
        with graph.inserting_before(gelu):
            square = graph.call_function(_POW, (x, 2))
            scaled = graph.call_function(_MUL, (square, b))
            shifted = graph.call_function(_ADD, (scaled, a))
            inner = graph.call_function(_MUL, (shifted, x))
            gate = graph.call_function(_SIGMOID, (inner,))
            out = graph.call_function(_MUL, (x, gate))
        for new in (square, scaled, shifted, inner, gate, out):
            # Each has the GELU's shape and dtype; A and B broadcast.
            new.meta = dict(meta)
        gelu.replace_all_uses_with(out)
        graph.erase_node(gelu)
        return out
