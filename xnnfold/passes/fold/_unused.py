"""Drop buffers and tensor constants that a program never reads.

PT2E quantization folds a computed weight on its own: ``convert_pt2e`` constant-folds
``weight_norm(g, v) -> quantize`` into an int8 tensor. The sources are then read by
nothing, and exporting the converted model still lifts every one of them. executorch
removes unused *parameters* before emitting (`remove_unused_parameters_pass`) but keeps
unused *buffers*, so a parametrization that keeps state in buffers (spectral_norm's power
iteration vectors ``_u``, ``_v``) leaves those in the `.pte` although no op reads them, and
the program ends up larger than the hand-folded model's. `remove_unused_constants` does for
buffers and lifted tensor constants what executorch does for parameters.
"""

from __future__ import annotations

import copy

from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from xnnfold._upstream import set_graph_signature

__all__ = ["remove_unused_constants"]

_REMOVABLE_KINDS = (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def remove_unused_constants(ep: ExportedProgram) -> ExportedProgram:
    """Remove every buffer and tensor constant of ``ep`` that no node reads or writes.

    In place, like executorch's `remove_unused_parameters_pass`; returns ``ep``. A buffer
    the program mutates is kept even when nothing reads it (its update is an output).

    Example::

        ep = torch.export.export(convert_pt2e(prepared), example_inputs)
        ep = xnnfold.remove_unused_constants(ep)
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
    """
    signature = ep.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    placeholders = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    unused = [
        spec
        for spec in signature.input_specs
        if spec.kind in _REMOVABLE_KINDS
        and spec.target not in mutated
        and spec.arg.name in placeholders
        and not placeholders[spec.arg.name].users
    ]
    if not unused:
        return ep
    new_signature = copy.deepcopy(signature)
    for spec in unused:
        new_signature.input_specs.remove(spec)
        # A buffer or constant lifted twice under one name is kept while another input
        # still refers to it.
        if not any(s.target == spec.target for s in new_signature.input_specs):
            ep.state_dict.pop(spec.target, None)
            ep.constants.pop(spec.target, None)
        ep.graph.erase_node(placeholders[spec.arg.name])
    set_graph_signature(ep, new_signature)
    ep.graph_module.recompile()
    return ep
