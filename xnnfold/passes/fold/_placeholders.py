"""The constant placeholders of a delegate's program, as the fold pass reads and rewrites them.

A fold replaces a weight computation by a new parameter of the delegate, reads the data of
the constants it evaluates, and erases the sources nothing reads afterwards.
`ConstantPlaceholders` does those three things for one program. torch's
``is_param``/``get_param`` and executorch's ``delete_constant_placeholder`` rebuild the
signature's name -> FQN dicts on every call, which made a delegate of a few hundred folds
quadratic in its inputs: this reads one snapshot of them, keeps it up to date with the
placeholders it adds, and rewrites the signature once.
"""

from __future__ import annotations

import torch
from executorch.backends.transforms.utils import create_constant_placeholder
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind
from torch.fx import Node

from xnnfold._meta import PROVENANCE_META_KEYS
from xnnfold._upstream import set_graph_signature
from xnnfold.passes.analysis import constant_fqns, constant_tensor

__all__ = ["ConstantPlaceholders"]


class ConstantPlaceholders:
    """Read, add and delete the constant placeholders of ``ep``.

    Built once the graph holds every constant the reads will ask about; each placeholder
    `add` creates is readable at once, under a name no node, parameter or constant of
    ``ep`` has.
    """

    def __init__(self, ep: ExportedProgram) -> None:
        self.ep = ep
        self._fqns = constant_fqns(ep)
        self._taken = (
            {node.name for node in ep.graph.nodes} | set(ep.state_dict) | set(ep.constants)
        )

    def tensor(self, node: Node) -> torch.Tensor:
        """The data of the constant placeholder ``node``."""
        fqn = self._fqns.get(node.name)
        tensor = constant_tensor(self.ep, fqn) if fqn is not None else None
        if tensor is None:
            raise RuntimeError(
                f"xnnfold: no data for constant '{node.name}' in the delegate's program"
            )
        return tensor

    def add(self, *, before: Node, base: str, value: torch.Tensor, origin: Node) -> Node:
        """A new parameter placeholder holding ``value``, inserted before ``before`` and
        named after ``base``; it inherits ``origin``'s provenance (`PROVENANCE_META_KEYS`),
        so `explain`, error messages and debug tools still name the module it came from."""
        with self.ep.graph.inserting_before(before):
            placeholder = create_constant_placeholder(
                self.ep, self.ep.graph, self._unique(base), InputKind.PARAMETER, value
            )
        placeholder.meta.update({k: v for k, v in origin.meta.items() if k in PROVENANCE_META_KEYS})
        # create_constant_placeholder stores the data under the node's name.
        self._fqns[placeholder.name] = placeholder.name
        return placeholder

    def release(self, source: Node) -> None:
        """Drop the data of ``source``, a constant placeholder nothing reads any more, at
        once, rather than at the end: where executorch deep-copied the delegate's
        program, its sources' bytes are freed while the next folds add theirs (where the
        copy shares the original's storage, only the reference goes). `delete` erases
        the placeholder later."""
        fqn = self._fqns.get(source.name)
        if fqn is not None:
            self.ep.state_dict.pop(fqn, None)
            self.ep.constants.pop(fqn, None)

    def delete(self, sources: list[Node]) -> None:
        """Erase ``sources`` (placeholders nothing reads), their data (where `release`
        has not dropped it) and their signature entries."""
        if not sources:
            return
        ep = self.ep
        names = {node.name for node in sources}
        signature = ep.graph_signature
        kept = []
        for spec in signature.input_specs:
            if getattr(spec.arg, "name", None) not in names:
                kept.append(spec)
            elif spec.kind == InputKind.PARAMETER or (
                spec.kind == InputKind.BUFFER and spec.persistent
            ):
                ep.state_dict.pop(spec.target, None)
            elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                ep.constants.pop(spec.target, None)
            else:
                raise RuntimeError(
                    f"xnnfold: cannot delete input '{spec.arg.name}' of the delegate: it is "
                    f"a {spec.kind.name}, not a parameter, buffer or constant"
                )
        for node in sources:
            ep.graph.erase_node(node)
        set_graph_signature(ep, ExportGraphSignature(kept, signature.output_specs))

    def _unique(self, base: str) -> str:
        """A name not taken yet, which it then takes."""
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name
