"""Arguments of a transformers model's ``forward`` that are not tensors.

A Python number it requires (Bark's fine model's ``codebook_idx``, which it branches on
and indexes its heads by): the sweep binds each to the model as a constant of its
program, as a caller exporting it would, and feeds the tensors alone. Another model's
cache or key-value states, or a structure of the model's own (`object_arguments`): the
sweep cannot give them, and a class that needs one says so.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from benchmarks.sweeps.transformers.input_tensors import as_int, find

# Python-number arguments, by name: the config field giving the value to bind (the
# first codebook a model predicts, after those it is given).
_FROM_CONFIG = {"codebook_idx": "n_codes_given"}
# A Python-number argument's value where the config gives none.
_DEFAULT = 1
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
# Arguments annotated as tensors that a class takes as another structure, by class.
_UNANNOTATED = {
    # Its preprocessor indexes its inputs by modality.
    "PerceiverForMultimodalAutoencoding": ("`inputs` (dict: modality name to tensor)",),
}
# Type names an argument the sweep can feed admits: a tensor, or a number it binds.
_TENSOR_LIKE = frozenset(
    {"Tensor", "LongTensor", "FloatTensor", "BoolTensor", "IntTensor", "int", "float", "bool"}
)


def constants(model: Any) -> dict[str, int]:
    """The arguments ``model.forward`` requires annotated ``int`` (a Python number the
    model branches on), each with the value to bind: the config's field `_FROM_CONFIG`
    names, else `_DEFAULT`."""
    found = {}
    for name, parameter in inspect.signature(model.forward).parameters.items():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in _NAMED
        if required and parameter.annotation in (int, "int"):
            field = _FROM_CONFIG.get(name)
            found[name] = as_int(find(model.config, field) if field else None, _DEFAULT)
    return found


def bound(model: Any, fixed: dict[str, int]) -> Any:
    """``model`` with the Python-number arguments ``fixed`` bound: called with its tensor
    inputs alone (as torch.export and the runtime call it)."""
    import torch

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.config = model.config

        def forward(self, **inputs: Any) -> Any:
            return self.model(**inputs, **fixed)

    return Bound().eval()


def object_arguments(model: Any, error: str) -> list[str]:
    """The arguments of ``model.forward`` that take no tensor (another model's cache or
    key-value states, a structure of its own: an annotation with neither a tensor nor a
    number in it, or `_UNANNOTATED`'s) that ``forward`` requires or ``error`` names, each
    as ``name (annotation)``: inputs the sweep, which feeds tensors, cannot give."""
    found = list(_UNANNOTATED.get(type(model).__name__, ()))
    for name, parameter in inspect.signature(model.forward).parameters.items():
        if parameter.kind not in _NAMED or parameter.annotation is inspect.Parameter.empty:
            continue
        kinds = _kinds(parameter.annotation)
        if not kinds or kinds & _TENSOR_LIKE:
            continue
        required = parameter.default is inspect.Parameter.empty
        if required or re.search(rf"\b{name}\b", error):
            found.append(f"`{name}` ({' | '.join(sorted(kinds))})")
    return found


def _kinds(annotation: Any) -> set[str]:
    """The names of the types a (union) annotation admits, None left out; a generic
    alias by its origin (``dict[str, ...]``: ``dict``)."""
    import typing

    members = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    names = set()
    for member in members:
        if member is type(None):
            continue
        origin = typing.get_origin(member) or member
        names.add(getattr(origin, "__name__", str(origin)))
    return names


def _is_union(annotation: Any) -> bool:
    import types
    import typing

    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
