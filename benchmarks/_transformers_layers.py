"""Layer indices of a transformers config that must stay within its layers after the
sweep caps the layer count (`_transformers_configs.at_level`): the intermediate layers
whose hidden states a model takes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from _transformers_fill import config_field

# Suffix of a list of layers whose hidden states a model concatenates (Mllama's vision
# ``intermediate_layers_indices``).
_INTERMEDIATE = "layers_indices"


def fit_intermediate_layers(config: Any) -> None:
    """The intermediate layers a model takes hidden states from (`_INTERMEDIATE`) that
    the shrunk layer count no longer has: each at the last layer (an index below the
    count, whether the model's hidden states begin with the embeddings' or not), as many
    as before (the width of their concatenation, which its projections take, counts
    them)."""
    layers = config_field(config, "num_hidden_layers")
    if not isinstance(layers, int):
        return
    for name, indices in list(vars(config).items()):
        if not name.endswith(_INTERMEDIATE) or not isinstance(indices, list) or not indices:
            continue
        if not all(isinstance(i, int) for i in indices) or max(indices) < layers:
            continue
        with contextlib.suppress(Exception):
            setattr(config, name, [min(i, layers - 1) for i in indices])
