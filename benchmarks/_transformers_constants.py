"""Arguments a transformers model's ``forward`` requires as Python numbers, not tensors
(Bark's fine model's ``codebook_idx``, which it branches on and indexes its heads by):
the sweep binds each to the model as a constant of its program, as a caller exporting it
would, and feeds the tensors alone.
"""

from __future__ import annotations

import inspect
from typing import Any

from _transformers_tensors import as_int, find

# Python-number arguments, by name: the config field giving the value to bind (the
# first codebook a model predicts, after those it is given).
_FROM_CONFIG = {"codebook_idx": "n_codes_given"}
# A Python-number argument's value where the config gives none.
_DEFAULT = 1
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


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
