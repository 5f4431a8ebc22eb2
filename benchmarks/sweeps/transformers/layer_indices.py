"""Layer counts and indices of a transformers config that must agree after the sweep
caps the layer count (`config_levels.at_level`): the last layers given a role,
a backbone's stages out, the layers a model hooks or takes hidden states from.
"""

from __future__ import annotations

import contextlib
from typing import Any

from benchmarks.sweeps.transformers.unset_fields import config_field

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


def fit_layer_roles(before: dict[str, Any], config: Any) -> None:
    """Counts of the last layers given a role (EoMT's ``num_blocks``, the layers that
    also process its queries) no more than the shrunk layers; layers that all reuse
    another model's keys and values (an assistant's ``num_kv_shared_layers``) all of
    the shrunk layers."""
    layers, role = config_field(config, "num_hidden_layers"), config_field(config, "num_blocks")
    if isinstance(layers, int) and isinstance(role, int) and role > layers:
        with contextlib.suppress(Exception):
            config.num_blocks = layers
    shared = before.get("num_kv_shared_layers")
    if isinstance(shared, int) and shared and shared == before.get("num_hidden_layers"):
        with contextlib.suppress(Exception):
            config.num_kv_shared_layers = layers


def fit_out_indices(config: Any) -> None:
    """The layers a backbone or a dense-prediction neck takes features from (a
    backbone's ``out_indices``, DPT's ``backbone_out_indices``) within the shrunk layers:
    as many, the last ones, the layer count raised to how many there are where it is
    smaller (each must be a distinct layer's output)."""
    layers = config_field(config, "num_hidden_layers")
    fields = vars(config)
    for name in ("_out_indices", "backbone_out_indices"):
        indices = fields.get(name)
        if not isinstance(layers, int) or not isinstance(indices, list) or not indices:
            continue
        if not all(isinstance(i, int) for i in indices) or max(indices) <= layers:
            continue
        count = max(layers, len(indices))
        fitted = list(range(count - len(indices) + 1, count + 1))
        with contextlib.suppress(Exception):
            config.num_hidden_layers = count
            if name == "backbone_out_indices":
                config.backbone_out_indices = fitted
                continue
            config.stage_names = ["stem"] + [f"stage{i}" for i in range(1, count + 1)]
            config._out_indices = fitted
            config._out_features = [f"stage{i}" for i in fitted]


def fit_hook_layers(config: Any) -> None:
    """The layers whose hidden states a model hooks (DepthPro's ``intermediate_hook_ids``,
    indices into its encoders' layers, its own or, where it has none, its sub-configs')
    within the shrunk layers: the last ones, in the order the hooks rank them (each must
    be a distinct layer's output)."""
    layers = config_field(config, "num_hidden_layers")
    if not isinstance(layers, int):
        counts = [
            config_field(v, "num_hidden_layers")
            for v in vars(config).values()
            if hasattr(v, "to_dict") and isinstance(config_field(v, "num_hidden_layers"), int)
        ]
        layers = min(counts) if counts else None
    for name, ids in list(vars(config).items()):
        if not name.endswith("hook_ids") or not isinstance(layers, int):
            continue
        if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):
            continue
        if not ids or max(ids) < layers or len(set(ids)) > layers:
            continue
        ranks = {i: layers - len(set(ids)) + r for r, i in enumerate(sorted(set(ids)))}
        with contextlib.suppress(Exception):
            setattr(config, name, [ranks[i] for i in ids])
