"""The constant tensors a partitioner was asked about, by FQN: the keys by which its
partition reads the lowering's `CrossMethodFacts`.

executorch asks a partitioner about each method's ATen program (``ops_to_not_decompose``)
and later partitions the method's edge program, which holds copies of the constants: the
tensors the methods share are found only through the ATen programs. A partition does not
say which method it is, and one FQN may name different tensors in the methods of one
lowering (each method's module tree names its own), so every tensor asked about under an
FQN is kept, weakly, and read.
"""

from __future__ import annotations

import weakref

import torch
from torch.export import ExportedProgram

from xnnfold.passes.analysis import constant_tensor, ProgramFacts
from xnnfold.passes.partition._facts import CrossMethodFacts

__all__ = ["AskedConstants"]


class AskedConstants:
    """The tensors behind each constant FQN one partitioner was asked about."""

    def __init__(self) -> None:
        self._refs: dict[str, list[weakref.ref[torch.Tensor]]] = {}

    def remember(self, ep: ExportedProgram) -> dict[str, torch.Tensor]:
        """The parameters and buffers of the ATen program ``ep``, by FQN, remembered."""
        signature = ep.graph_signature
        tensors: dict[str, torch.Tensor] = {}
        for fqn in [*signature.parameters, *signature.buffers]:
            tensor = constant_tensor(ep, fqn)
            if tensor is not None:
                tensors[fqn] = tensor
                refs = [ref for ref in self._refs.get(fqn, []) if ref() is not None]
                if not any(ref() is tensor for ref in refs):
                    refs.append(weakref.ref(tensor))
                self._refs[fqn] = refs
        return tensors

    def layers(self) -> list[dict[str, torch.Tensor]]:
        """The tensors remembered, as FQN -> tensor maps: the i-th map holds each FQN's
        i-th tensor."""
        layers: list[dict[str, torch.Tensor]] = []
        for fqn, refs in self._refs.items():
            for i, tensor in enumerate(t for ref in refs if (t := ref()) is not None):
                if i == len(layers):
                    layers.append({})
                layers[i][fqn] = tensor
        return layers

    def program_facts(self, facts: CrossMethodFacts) -> ProgramFacts:
        """What the lowering's methods do with the constants remembered, by their FQNs:
        for an FQN that names several tensors, what they do with any of them."""
        found = [facts.of(layer) for layer in self.layers()]
        return ProgramFacts(
            frozenset().union(*(f.written_buffers for f in found)),
            frozenset().union(*(f.stored_elsewhere for f in found)),
        )

    def tied_across_methods(self, facts: CrossMethodFacts) -> frozenset[str]:
        """The FQNs of the remembered tables tied across the lowering's methods."""
        return frozenset().union(*(facts.tied_across_methods(layer) for layer in self.layers()))
