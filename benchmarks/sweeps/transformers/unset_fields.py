"""Fields of a transformers config the sweep sets because its model needs them and the
config class's defaults leave them unset: a config is otherwise not buildable.

Two kinds (a third, the flags a model class needs, is `class_fields`'). Fields a
config leaves None (`complete`): a documented or model-code value (`REQUIRED`), a
per-layer list from the layer types its model's code tests for, a per-layer-type RoPE
table with an entry for each layer type. Fields a model
reads that its config class does not declare (`construct`): a checkpoint's config carries
them, or the composite config sets them on its sub-config; the sweep takes the same field
of a config beside it, else the field of that config it names a kind of.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from benchmarks.sweeps.transformers.per_label_fields import fill_per_label

# Fields some configs leave None by default, which their models need set: the value each
# gets (documented examples where the config documents one: Granite 4 Vision's
# ``downsample_rate`` and ``deepstack_layer_map``; an empty vocabulary map for Chameleon
# and Emu3, whose image-token lookups then find none, which text input does not need).
REQUIRED: dict[str, Any] = {
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
    "num_experts": 2,
    "top_k_experts": 1,
    "moe_intermediate_size": 64,
    "vocabulary_map": {},
    "downsample_rate": "1/2",
    "deepstack_layer_map": [[0, 0]],
    # A dense-prediction head's blocks (Sapiens 2): one upsampling, one refining block.
    "upsample_out_channels": [32],
    "conv_out_channels": [32],
    # A feature pyramid's four stages (strides 4 to 32) upsampled to the first's size
    # (PP-OCR's detection necks).
    "scale_factor_list": [1, 2, 4, 8],
    # DBRX clamps its queries, keys and values with it unconditionally: its checkpoints'.
    "clip_qkv": 8.0,
    # A QSA token indexer (Qwen4-Exp's, in every layer of a type its default layers have):
    # one key head, as its config requires; heads as wide as the attention's, which its
    # RoPE must fit; a budget of two blocks of four tokens.
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 256,
    "indexer_budget": 8,
    "indexer_compress_ratio": 4,
}
# Suffixes of per-layer lists: a type (attention, MLP, block) for each layer.
PER_LAYER = ("layer_types", "layers_block_type", "block_types")
# A field's documented default in a config class's docstring.
_DOCUMENTED = re.compile(r"^\s*(\w+) \(.*defaults to `([^`]+)`", re.MULTILINE)
# A modeling file's mask table that makes the sliding-window mask whatever the layers.
_SLIDING_MASK_ALWAYS = '"sliding_attention": create_sliding_window_causal_mask('
# Fields whose None turns a feature off, whatever default the docstring gives (sliding
# attention where the config does not use it).
_OFF_WHEN_NONE = frozenset({"sliding_window"})
# What a missing attribute error names: the config class and the field.
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
# Missing fields a config's own field gives, as its model assumes: key-value heads, one
# per query head (multi-head attention).
_OWN = {"num_key_value_heads": "num_attention_heads"}
# How many missing fields `construct` fills before it gives up.
_MAX_FILLS = 8


def complete(config: Any) -> None:
    """Set the fields ``config`` leaves None that its docstring gives a default
    (`_documented`), those `REQUIRED` names, a None
    ``num_key_value_heads`` to the attention heads and a None ``head_dim`` to the hidden
    size over the heads (as the models that read them assume), None per-layer lists
    (`_layer_list`) and an empty per-layer-type RoPE table (`_rope_per_type`)."""
    fields = vars(config)
    for name, value in _documented(type(config)).items():
        if fields.get(name, "absent") is None and name not in _OFF_WHEN_NONE:
            with contextlib.suppress(Exception):
                setattr(config, name, copy.deepcopy(value))
    for name, value in REQUIRED.items():
        if name in fields and fields[name] is None:
            with contextlib.suppress(Exception):
                setattr(config, name, copy.deepcopy(value))
    hidden, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    if "num_key_value_heads" in fields and fields["num_key_value_heads"] is None and heads:
        # None is multi-head attention: a key-value head per query head.
        with contextlib.suppress(Exception):
            config.num_key_value_heads = heads
    if "head_dim" in fields and fields["head_dim"] is None and hidden and heads:
        with contextlib.suppress(Exception):
            config.head_dim = hidden // heads
    layers = fields.get("num_hidden_layers")
    for name, value in list(fields.items()):
        if value is None and name.endswith(PER_LAYER) and isinstance(layers, int):
            kinds = _layer_list(type(config).__module__, name)
            if kinds:
                with contextlib.suppress(Exception):
                    setattr(config, name, (kinds * layers)[:layers] if layers > 1 else kinds[:1])
    for name, value in list(fields.items()):
        keys = _conv_arguments(type(config).__module__, name) if value is None else ()
        if keys:
            with contextlib.suppress(Exception):
                setattr(config, name, {key: [1, 1, 0] for key in keys})
    _rope_per_type(config)
    fill_per_label(config)
    kinds = fields.get("layer_types") or ()
    source = modeling_source(type(config).__module__)
    if fields.get("sliding_window", 0) is None and (
        "sliding_attention" in kinds or _SLIDING_MASK_ALWAYS in source
    ):
        # Sliding layers, or a model that makes their mask whatever its layers, need a
        # window: the one most configs declare.
        with contextlib.suppress(Exception):
            config.sliding_window = _common_defaults().get("sliding_window")


@functools.cache
def _documented(config_class: type) -> dict[str, Any]:
    """The defaults ``config_class``'s docstring gives its fields (``name (`list[int]`,
    *optional*, defaults to `[3, 2, 2]`)``), those that are Python literals."""
    found = {}
    for name, text in _DOCUMENTED.findall(config_class.__doc__ or ""):
        with contextlib.suppress(ValueError, SyntaxError):
            found[name] = ast.literal_eval(text)
    return found


@functools.cache
def _conv_arguments(config_module: str, name: str) -> tuple[str, ...]:
    """The keys of config mapping ``name`` whose values the modeling file beside
    ``config_module`` spreads into a convolution's arguments (``*name["key"]``: kernel,
    stride, padding) or indexes for them (``kernel_size=name["key"][0]``): each is given
    a 1x1 convolution's (1, 1, 0), which keeps the feature map's shape as the summed
    branches need."""
    source = modeling_source(config_module)
    if not re.search(rf"\*{name}\[", source):
        return ()
    found = re.findall(rf"{name}\[[\"'](\w+)[\"']\]", source)
    return tuple(dict.fromkeys(found))


def _rope_per_type(config: Any) -> None:
    """An empty RoPE table of a config with layer types (a model that reads one entry
    per layer type, absent entries meaning no RoPE only where set to None): default RoPE
    for each type, as the config's checkpoints give."""
    rope, kinds = config_field(config, "rope_parameters"), config_field(config, "layer_types")
    if rope == {} and isinstance(kinds, list) and kinds:
        theta = config_field(config, "rope_theta") or 10_000.0
        with contextlib.suppress(Exception):
            config.rope_parameters = {
                kind: {"rope_type": "default", "rope_theta": theta} for kind in dict.fromkeys(kinds)
            }


@functools.cache
def _layer_list(config_module: str, name: str) -> list[str]:
    """The layer types the modeling file beside ``config_module`` tests per-layer list
    ``name`` for (``config.mlp_layer_types[i] == "sparse"``): one layer of another type
    (``dense`` for an MLP list, ``full_attention`` for attention), then each type tested."""
    source = modeling_source(config_module)
    pattern = rf"config\.{name}\[\w+\]\s*[!=]=\s*[\"'](\w+)[\"']"
    tested = list(dict.fromkeys(re.findall(pattern, source)))
    if not tested:
        return []
    other = "dense" if "mlp" in name else "full_attention"
    return ([other] if other not in tested else []) + tested


@functools.cache
def modeling_source(config_module: str) -> str:
    """The source of the modeling file beside configuration module ``config_module``."""
    origin = getattr(sys.modules.get(config_module), "__file__", None)
    if origin is None:
        return ""
    path = Path(origin)
    modeling = path.with_name(path.name.replace("configuration_", "modeling_", 1))
    return modeling.read_text() if modeling.exists() else ""


def construct(model_class: type, config: Any, shrink: Callable[[Any], Any]) -> Any:
    """``model_class(config)``, the fields its model reads that a config in ``config``'s
    tree does not declare filled in turn (`_fill`), and, where it stops on a None, the
    sub-configs ``config`` leaves None made from their declared classes' defaults, passed
    through ``shrink`` (a head's config, which a backbone alone does not need). Raises
    what the class raises where neither helps."""
    for _ in range(_MAX_FILLS):
        try:
            return model_class(config)
        except (AttributeError, TypeError) as error:
            found = _MISSING.search(str(error))
            if found and found.group(1) != "NoneType":
                if not _fill(config, *found.groups()):
                    raise
            elif "NoneType" not in str(error) or not _fill_sub_configs(config, shrink):
                raise
    return model_class(config)


def _fill_sub_configs(config: Any, shrink: Callable[[Any], Any]) -> bool:
    """Set each sub-config ``config``'s tree leaves None to its declared class's default,
    through ``shrink``. Returns whether any was set."""
    done = False
    for inner in list(config_tree(config)):
        declared = getattr(inner, "sub_configs_defaults", None) or {}
        for name, spec in declared.items():
            if getattr(inner, name, "absent") is not None:
                continue
            spec = getattr(spec, "config_class", spec)
            if isinstance(spec, type) and spec.__name__ != "AutoConfig":
                with contextlib.suppress(Exception):
                    setattr(inner, name, shrink(spec()))
                    done = True
    return done


def _fill(root: Any, class_name: str, name: str) -> bool:
    """Set field ``name`` on each config of class ``class_name`` in ``root``'s tree:
    the same field of another config of the tree, else of a config class of its module
    (the composite config that sets it on its sub-configs), else the config's own field
    ``name`` ends with (``shared_expert_intermediate_size``: ``intermediate_size``; RoPE's
    ``rope_theta``: its RoPE table's). Returns whether any was set."""
    targets = [c for c in config_tree(root) if type(c).__name__ == class_name]
    if not targets:
        return False
    own = config_field(targets[0], _OWN.get(name, ""))
    value = own if own is not None else _beside(root, targets, name)
    done = False
    for target in targets:
        found = value if value is not None else _own_kind(target, name)
        if found is not None:
            try:
                setattr(target, name, copy.deepcopy(found))
            except Exception:
                object.__setattr__(target, name, copy.deepcopy(found))
            done = True
    return done


def _beside(root: Any, targets: list[Any], name: str) -> Any:
    for other in config_tree(root):
        if other not in targets:
            rope = config_field(other, "rope_parameters")
            value = config_field(other, name)
            if value is None and isinstance(rope, dict):
                value = rope.get(name)
            if value is not None:
                return value
    module = sys.modules.get(type(targets[0]).__module__)
    for candidate in vars(module).values() if module else ():
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            for field in dataclasses.fields(candidate):
                if field.name == name and field.default not in (None, dataclasses.MISSING):
                    return field.default
    return _common_defaults().get(name)


@functools.cache
def _common_defaults() -> dict[str, Any]:
    """Each field name of transformers' config classes: the default most of them that
    declare it give it (a checkpoint's config carries a field its class may not declare,
    with the value its kin declare: a contrastive model's ``logit_scale_init_value``)."""
    from collections import Counter

    from transformers import CONFIG_MAPPING

    counts: dict[str, Counter[str]] = {}
    values: dict[str, Any] = {}
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            config_class = CONFIG_MAPPING[model_type]
        except Exception:
            continue
        if not dataclasses.is_dataclass(config_class):
            continue
        for field in dataclasses.fields(config_class):
            default = field.default
            if isinstance(default, (int, float, str)) and not isinstance(default, bool):
                key = repr(default)
                counts.setdefault(field.name, Counter())[key] += 1
                values[f"{field.name}={key}"] = default
    return {
        name: values[f"{name}={counter.most_common(1)[0][0]}"] for name, counter in counts.items()
    }


def _own_kind(config: Any, name: str) -> Any:
    rope = config_field(config, "rope_parameters")
    if isinstance(rope, dict) and name in rope:
        return rope[name]
    parts = name.split("_")
    for start in range(1, len(parts)):
        value = config_field(config, "_".join(parts[start:]))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def config_tree(config: Any) -> Iterator[Any]:
    """``config`` and its sub-configs, depth first."""
    yield config
    for value in list(vars(config).values()):
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            yield from config_tree(value)


def config_field(config: Any, name: str) -> Optional[Any]:
    """``config``'s field ``name``, or None (a config with per-layer fields raises for
    one that varies across its layers)."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None
