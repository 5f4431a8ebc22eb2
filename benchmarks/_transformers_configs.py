"""The configs the transformers sweep builds a class from: its config class's defaults,
shrunk (`LEVELS`) within the config's own constraints.

Levels, tried in turn while the class fails to build or run eagerly: every size shrunk
(`_EXACT_CAPS`, channel widths capped); the widths scaled down together (heads and counts
kept, so every ratio and divisibility among them holds); only the counts capped (layers,
vocabularies, experts, positions); the default. At every level, fields a config leaves
None that its model needs are set (`_REQUIRED`), and fields that must agree with a shrunk
size are made to (`layer_types`, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any, Optional

# The fallback ``mrope_section`` in a modeling file's code.
_MROPE_DEFAULT = re.compile(r"""get\(["']mrope_section["'],\s*\[([\d,\s]+)\]\)""")
# Integer config fields, by name: the cap each is shrunk to.
_EXACT_CAPS = {
    "vocab_size": 256,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "num_attention_heads": 2,
    "num_heads": 2,
    "n_head": 2,
    "n_heads": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "embed_dim": 32,
    "dim": 32,
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "d_ff": 64,
    "n_inner": 64,
    "image_size": 64,
    "num_experts": 2,
    "n_routed_experts": 2,
    "num_local_experts": 2,
    "num_experts_per_tok": 1,
    "upsample_initial_channel": 32,
    "max_position_embeddings": 512,
}
# Suffixes of further integer fields, by name: the cap each is shrunk to (an MoE expert's
# or a shared expert's width; a state-space model's heads, which must divide its width).
_SUFFIX_CAPS = {"intermediate_size": 64, "_heads": 2}
# Suffixes of per-layer lists: a type (attention, MLP, block) for each layer.
_PER_LAYER = ("layer_types", "layers_block_type", "block_types")
# Suffixes of integer or integer-list fields that size channels (or group them).
_CHANNEL_SUFFIXES = (
    "_hidden_size",
    "_channels",
    "_dim",
    "_dims",
    "_dimension",
    "hidden_sizes",
    "_size_list",
    "_groups",
)
_NOT_CHANNELS = ("kernel", "stride", "patch", "pad", "dilation", "head_dim", "mel", "in_dim")
# Fields that count (layers, vocabularies, experts, positions): the only ones capped at
# the "counts" level, which keeps every width the model's code may rely on.
_COUNT_CAPS = {
    **{n: v for n, v in _EXACT_CAPS.items() if "layer" in n or "experts" in n},
    "vocab_size": 256,
    "max_position_embeddings": 512,
    # Layers that reuse an earlier layer's keys and values (Gemma 3n): none of two.
    "num_kv_shared_layers": 0,
}
# Widths the "scaled" level divides, together, by `SCALE` (heads and counts kept, so
# every ratio and divisibility among them holds).
_WIDTHS = frozenset(
    {
        "hidden_size",
        "d_model",
        "n_embd",
        "embed_dim",
        "dim",
        "intermediate_size",
        "ffn_dim",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "d_ff",
        "n_inner",
        "head_dim",
        "d_kv",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "upsample_initial_channel",
    }
)
SCALE = 4
# Further widths the "scaled" level divides: attention's per-head sizes and low ranks
# (multi-head latent attention's ``qk_rope_head_dim``, ``kv_lora_rank``, ...).
_SCALED_SUFFIXES = ("head_dim", "_rank", "intermediate_size", "_hidden_size")
# The configs tried in turn while the class fails to build or run eagerly.
LEVELS = ("shrunk", "scaled", "counts", "default")


def _is_count(name: str, value: Any) -> bool:
    return name in _COUNT_CAPS or (
        isinstance(value, int) and ("layers" in name or name == "depth" or name.endswith("_depth"))
    )


def _level_value(level: str, name: str, value: Any) -> Any:
    """``value`` of config field ``name`` at ``level``: a tuple as a list, as every config
    loaded from a checkpoint's JSON has it (a model may add a list to it)."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, bool) or level == "default":
        return value
    if _is_count(name, value) and isinstance(value, int):
        return min(value, _COUNT_CAPS.get(name, 2))
    if name in ("depths", "encoder_depths", "decoder_depths") and isinstance(value, (list, tuple)):
        return type(value)(min(v, 1) if isinstance(v, int) else v for v in value)
    channels = name.endswith(_CHANNEL_SUFFIXES) and not any(w in name for w in _NOT_CHANNELS)
    if level == "scaled":
        if name in _WIDTHS or channels or name.endswith(_SCALED_SUFFIXES):
            return _scaled(value)
        return value
    if level != "shrunk":
        return value
    if name in _EXACT_CAPS and isinstance(value, int):
        return min(value, _EXACT_CAPS[name])
    for suffix, cap in _SUFFIX_CAPS.items():
        if name.endswith(suffix) and isinstance(value, int):
            return min(value, cap)
    if channels and isinstance(value, int) and value > 32:
        return 32
    if channels and isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return type(value)(min(v, 32) for v in value)
    return value


def _scaled(value: Any) -> Any:
    if isinstance(value, int) and value % SCALE == 0 and value >= 4 * SCALE:
        return value // SCALE
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return type(value)(_scaled(v) for v in value)
    return value


def _own_backbone(config: Any) -> Any:
    """A backbone config that asks for timm (DETR and its kin take one by default) as
    transformers' ResNet with the same stages out: the other backbone the model's config
    offers, which needs no timm (timm's torchvision does not load beside CPU torch)."""
    from transformers import ResNetConfig

    indices = getattr(config, "out_indices", None) or [1, 2, 3, 4]
    return ResNetConfig(
        num_channels=getattr(config, "num_channels", 3),
        out_features=[f"stage{i}" for i in indices],
    )


# Fields some configs leave None by default, which their models need set: the value
# each gets (a config built from its class's defaults is otherwise not buildable).
_REQUIRED = {
    "vocab_size": 256,
    "mask_token_id": 1,
    "pad_token_id": 0,
    "prediction_length": 4,
    "context_length": 8,
    "decoder_hidden_size": 32,
    "decoder_depth": 1,
    "decoder_num_heads": 2,
    "n_routed_experts": 2,
    "n_shared_experts": 1,
    "num_experts_per_tok": 1,
}


def _complete(config: Any) -> None:
    """Set the fields `_REQUIRED` names that ``config`` leaves None, a None
    ``num_key_value_heads`` to the attention heads and a None ``head_dim`` to the hidden
    size over the heads, as the models that read them assume."""
    fields = vars(config)
    for name, value in _REQUIRED.items():
        if name in fields and fields[name] is None:
            with contextlib.suppress(Exception):
                setattr(config, name, value)
    hidden, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None and heads:
        # None is multi-head attention: a key-value head per query head.
        with contextlib.suppress(Exception):
            config.num_key_value_heads = heads
    if "head_dim" in fields and fields["head_dim"] is None and hidden and heads:
        with contextlib.suppress(Exception):
            config.head_dim = hidden // heads


def _fit_per_layer(fields: dict[str, Any]) -> dict[str, Any]:
    """The per-layer lists among ``fields`` (`_PER_LAYER`: attention, MLP or block types)
    longer than the capped layer count, fitted to it: each type kept once (a model that
    checks which layer types produce and use a cache needs every type), the layer count
    raised to the most types one list has where it is smaller. Returns what changes."""
    layers = fields.get("num_hidden_layers")
    lists = {
        name: value
        for name, value in fields.items()
        if name.endswith(_PER_LAYER) and isinstance(value, list)
    }
    if not isinstance(layers, int) or not any(len(v) > layers for v in lists.values()):
        return {}
    kinds = {name: list(dict.fromkeys(value)) for name, value in lists.items()}
    count = max([layers] + [len(k) for k in kinds.values()])
    changes: dict[str, Any] = {
        name: kind + kind[-1:] * (count - len(kind)) for name, kind in kinds.items()
    }
    changes["num_hidden_layers"] = count
    return changes


def _split(total: int, parts: list[int]) -> list[int]:
    """``total`` split in ``len(parts)`` positive parts in the proportions of ``parts``."""
    shares = [max(1, total * p // sum(parts)) for p in parts]
    shares[0] += total - sum(shares)
    return shares


def _fit_rope_sections(config: Any) -> None:
    """Multimodal RoPE's ``mrope_section`` (temporal, height, width frequencies) sized to
    the shrunk rotary half-dimension it must sum to, in its proportions: the config's
    own, else the one the model's code falls back on (`_mrope_default`)."""
    rope = _field(config, "rope_parameters")
    if not isinstance(rope, dict):
        return
    sections = rope.get("mrope_section") or _mrope_default(type(config).__module__)
    hidden, heads = _field(config, "hidden_size"), _field(config, "num_attention_heads")
    head = _field(config, "head_dim") or (hidden // heads if hidden and heads else None)
    if not sections or not isinstance(head, int):
        return
    partial = rope.get("partial_rotary_factor") or _field(config, "partial_rotary_factor")
    half = int(head * (partial or 1.0)) // 2
    if half >= len(sections) and sum(sections) != half:
        rope["mrope_section"] = _split(half, list(sections))


@functools.cache
def _mrope_default(config_module: str) -> Optional[tuple[int, ...]]:
    """The ``mrope_section`` the modeling file beside configuration module
    ``config_module`` falls back on, if its code reads one."""
    origin = getattr(sys.modules.get(config_module), "__file__", None)
    if origin is None:
        return None
    path = Path(origin)
    modeling = path.with_name(path.name.replace("configuration_", "modeling_", 1))
    found = _MROPE_DEFAULT.search(modeling.read_text()) if modeling.exists() else None
    return tuple(int(n) for n in found.group(1).split(",")) if found else None


def at_level(config: Any, level: str, *, derive: bool = False) -> Any:
    """``config`` (a config class's default instance) at ``level``: its fields (and its
    sub-configs') set for the level on it, or, where ``derive``, passed to its class,
    which derives the fields it computes from others (`_derived_fields`) again from the
    shrunk ones (a head size from the width and the heads, a state-space model's head
    width from its expansion, ...). Raises what the config class raises."""
    _complete(config)
    backbone = getattr(config, "backbone_config", None)
    if getattr(backbone, "model_type", None) == "timm_backbone":
        config.backbone_config = _own_backbone(backbone)
    if derive:
        kwargs = {}
        derived = _derived_fields(type(config))
        for name in _init_fields(type(config)):
            if not hasattr(config, name):
                continue
            value = getattr(config, name)
            if _is_config(value):
                kwargs[name] = at_level(value, level, derive=True)
            elif name in derived and value != derived[name]:
                kwargs[name] = derived[name]
            else:
                kwargs[name] = _level_value(level, name, value)
        kwargs.update(_fit_per_layer(kwargs))
        config = type(config)(**kwargs)
        _complete(config)
    else:
        for name, value in list(vars(config).items()):
            if name.startswith("_"):
                continue
            if _is_config(value):
                setattr(config, name, at_level(value, level))
                continue
            new = _level_value(level, name, value)
            if new != value:
                # A property without a setter keeps its value.
                with contextlib.suppress(Exception):
                    setattr(config, name, new)
        for name, value in _fit_per_layer(vars(config)).items():
            with contextlib.suppress(Exception):
                setattr(config, name, value)
    _fit_rope_sections(config)
    vocab = getattr(config, "vocab_size", None)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        token = getattr(config, name, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            setattr(config, name, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _field(config: Any, name: str) -> Any:
    """``config``'s field ``name``, or None (a config with per-layer fields raises for
    one that varies across its layers)."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None


def _is_config(value: Any) -> bool:
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def _init_fields(config_class: type) -> list[str]:
    """The fields ``config_class``'s constructor takes."""
    return [
        f.name for f in dataclasses.fields(config_class) if f.init and not f.name.startswith("_")
    ]


def _derived_fields(config_class: type) -> dict[str, Any]:
    """The fields ``config_class`` derives from others when left at their declared default
    (None or ``"auto"``): name -> that default. Per-layer lists are kept (`_fit_per_layer`
    keeps each type the model has), and so are the fields `_complete` sets."""
    return {
        f.name: f.default
        for f in dataclasses.fields(config_class)
        if f.init
        and f.default is not dataclasses.MISSING
        and (f.default is None or f.default == "auto")
        and f.name not in _REQUIRED
        and not f.name.endswith(_PER_LAYER)
    }
