"""The configs the transformers sweep builds a class from: its config class's defaults,
shrunk (`LEVELS`) within the config's own constraints.

Levels, tried in turn while the class fails to build or run eagerly: every size shrunk
(`_EXACT_CAPS`, channel widths capped); the widths scaled down together (heads and counts
kept, so every ratio and divisibility among them holds); only the counts capped (layers,
vocabularies, experts, positions); the default. At every level, fields a config leaves
None that its model needs are set (`unset_fields.complete`), and fields that must agree with a shrunk
size are made to (`layer_types`, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from benchmarks.sweeps.transformers.agreeing_sizes import (
    fit_aggregated_channels,
    fit_expert_groups,
    fit_feature_sizes,
    fit_latent_attention,
    fit_mirrored_lists,
    fit_parts,
    fit_per_layer,
    fit_pixel_shuffle,
    fit_rope_sections,
    fit_scaled_patch,
    fit_stage_heads,
    fit_stage_widths,
    fit_sub_widths,
    fit_summed_widths,
    mirrored_lists,
)
from benchmarks.sweeps.transformers.backbones import fit_every_stage_out, fit_stage_channels
from benchmarks.sweeps.transformers.layer_indices import (
    fit_hook_layers,
    fit_intermediate_layers,
    fit_layer_roles,
    fit_out_indices,
)
from benchmarks.sweeps.transformers.token_indices import fit_answer_tokens, fit_media_tokens
from benchmarks.sweeps.transformers.unset_fields import complete, PER_LAYER, REQUIRED

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
# or a shared expert's width; a state-space model's heads, which must divide its width;
# multi-head latent attention's per-head sizes, which ``head_dim`` may be one of).
_SUFFIX_CAPS = {"intermediate_size": 64, "_heads": 2, "head_dim": 16}
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
    "_channel_list",
    "_dim_per_stage",
    # Another part's width that this part's must match (a global transformer's, a
    # thinker's whose states a talker takes).
    "hidden_size_global",
    "embedding_size",
    # A convolution's output channels that a residual adds back (Phi-4's audio conformer).
    "_out_channel",
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
    # Object queries: a two-stage detector picks them among a shrunk image's few tokens.
    "num_queries": 8,
    # Blocks of a stack (a conformer's, a folding trunk's and its structure module's),
    # and the passes of a folding trunk over its own output (ESMFold's, where its
    # caller gives none): one.
    "num_blocks": 2,
    "max_recycles": 1,
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


def at_level(config: Any, level: str, *, derive: bool = False) -> Any:
    """``config`` (a config class's default instance) at ``level``: its fields (and its
    sub-configs') set for the level on it, or, where ``derive``, passed to its class,
    which derives the fields it computes from others (`_derived_fields`) again from the
    shrunk ones (a head size from the width and the heads, a state-space model's head
    width from its expansion, ...). Raises what the config class raises."""
    complete(config)
    before = dict(vars(config))
    widths = {
        name: getattr(value, "hidden_size", None)
        for name, value in before.items()
        if _is_config(value)
    }
    images = {
        name: getattr(value, "image_size", None)
        for name, value in before.items()
        if _is_config(value)
    }
    lists = mirrored_lists(config)
    backbone = getattr(config, "backbone_config", None)
    if getattr(backbone, "model_type", None) == "timm_backbone":
        config.backbone_config = _own_backbone(backbone)
        # Timm's arguments go with its backbone; the layer norms a timm Swin's
        # channels-last maps take do not fit the ResNet's channels-first ones.
        if isinstance(getattr(config, "timm_kwargs", None), dict):
            config.timm_kwargs = {}
        if getattr(config, "apply_layernorm_after_vision_backbone", None):
            config.apply_layernorm_after_vision_backbone = False
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
        kwargs.update(fit_per_layer(kwargs))
        config = type(config)(**kwargs)
        complete(config)
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
        for name, value in fit_per_layer(vars(config)).items():
            with contextlib.suppress(Exception):
                setattr(config, name, value)
    fit_rope_sections(config)
    fit_latent_attention(config)
    fit_expert_groups(config)
    fit_layer_roles(before, config)
    fit_pixel_shuffle(config)
    fit_out_indices(config)
    fit_parts(before, config)
    fit_sub_widths(before, widths, config)
    fit_summed_widths(before, widths, config)
    fit_aggregated_channels(before, config)
    fit_every_stage_out(config)
    fit_stage_channels(config)
    fit_hook_layers(config)
    fit_intermediate_layers(config)
    fit_stage_heads(config)
    fit_stage_widths(before, config)
    fit_mirrored_lists(before, lists, config)
    fit_feature_sizes(images, config)
    fit_scaled_patch(images, config, _EXACT_CAPS["image_size"])
    vocab = getattr(config, "vocab_size", None)
    tokens = [n for n in vars(config) if n.endswith("pad_token_id")]
    for name in (*tokens, "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        token = getattr(config, name, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            setattr(config, name, vocab - 1)
    fit_answer_tokens(config)
    fit_media_tokens(config)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _is_config(value: Any) -> bool:
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def _init_fields(config_class: type) -> list[str]:
    """The fields ``config_class``'s constructor takes."""
    return [
        f.name for f in dataclasses.fields(config_class) if f.init and not f.name.startswith("_")
    ]


def _derived_fields(config_class: type) -> dict[str, Any]:
    """The fields ``config_class`` derives from others when left at their declared default
    (None or ``"auto"``): name -> that default. Per-layer lists are kept (`fit_per_layer`
    keeps each type the model has), and so are the fields `complete` sets."""
    return {
        f.name: f.default
        for f in dataclasses.fields(config_class)
        if f.init
        and f.default is not dataclasses.MISSING
        and (f.default is None or f.default == "auto")
        and f.name not in REQUIRED
        and not f.name.endswith(PER_LAYER)
    }
