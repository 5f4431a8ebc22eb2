"""Sizes of a transformers config that must agree with one another, made to agree after
the sweep shrinks it (`config_levels.at_level`): per-layer lists and the layer
count, RoPE sections and the rotary half-width, multi-head latent attention's head sizes,
grouped experts and the experts, sizes that split the hidden size.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from pathlib import Path
from typing import Any, Optional

from benchmarks.sweeps.transformers.unset_fields import config_field, PER_LAYER

# Layer types whose layers share one block's weights (Zamba's hybrid layers: its model
# ties every one to the first, which needs a second).
_SHARED_TYPES = frozenset({"hybrid"})
# The fallback ``mrope_section`` in a modeling file's code.
_MROPE_DEFAULT = re.compile(r"""get\(["']mrope_section["'],\s*\[([\d,\s]+)\]\)""")

# Suffixes of fields naming an input width.
_INPUT_WIDTHS = ("_in_dim", "_input_dim", "_input_size")
# A modeling file's read of ``mrope_section`` with no fallback, and the sections then
# given: four equal axes (HunYuan VL's documented position, width, height, image index).
_MROPE_REQUIRED = 'rope_parameters.get("mrope_section")'
_MROPE_AXES = (1, 1, 1, 1)


def fit_per_layer(fields: dict[str, Any]) -> dict[str, Any]:
    """The per-layer lists among ``fields`` (`PER_LAYER`: attention, MLP or block types)
    longer than the capped layer count, fitted to it: each type kept once (a model that
    checks which layer types produce and use a cache needs every type), a type whose
    layers share one block's weights twice (`_SHARED_TYPES`: the tie needs a layer to tie
    to), the layer count raised to the most types one list has where it is smaller.
    Returns what changes."""
    layers = fields.get("num_hidden_layers")
    lists = {
        name: value
        for name, value in fields.items()
        if name.endswith(PER_LAYER) and isinstance(value, list)
    }
    if not isinstance(layers, int) or not any(len(v) > layers for v in lists.values()):
        return {}
    kinds = {
        name: [
            k
            for kind in dict.fromkeys(value)
            for k in [kind] * (2 if kind in _SHARED_TYPES and value.count(kind) > 1 else 1)
        ]
        for name, value in lists.items()
    }
    count = max([layers] + [len(k) for k in kinds.values()])
    changes: dict[str, Any] = {
        name: kind + kind[-1:] * (count - len(kind)) for name, kind in kinds.items()
    }
    changes["num_hidden_layers"] = count
    return changes


def _split(total: int, parts: list[int]) -> list[int]:
    """``total`` split in ``len(parts)`` positive parts in the proportions of ``parts``,
    equal parts kept equal where the remainder allows (a model that stacks the height and
    width sections needs them equal): the remainder goes to the groups of equal parts with
    the largest fractions first, a group only whole, the rest to the first part."""
    shares = [max(1, total * p // sum(parts)) for p in parts]
    groups = sorted(
        {p: [i for i, q in enumerate(parts) if q == p] for p in parts}.values(),
        key=lambda g: (-(total * parts[g[0]] % sum(parts)), g[0]),
    )
    for group in groups:
        if len(group) <= total - sum(shares):
            for i in group:
                shares[i] += 1
    shares[0] += total - sum(shares)
    return shares


def fit_rope_sections(config: Any) -> None:
    """Multimodal RoPE's ``mrope_section`` (temporal, height, width frequencies) sized to
    the shrunk rotary half-dimension it must sum to, in its proportions: the config's
    own, else the one the model's code falls back on (`_mrope_default`)."""
    rope = config_field(config, "rope_parameters")
    if not isinstance(rope, dict):
        return
    sections = rope.get("mrope_section") or _mrope_default(type(config).__module__)
    hidden, heads = config_field(config, "hidden_size"), config_field(config, "num_attention_heads")
    head = config_field(config, "head_dim") or (hidden // heads if hidden and heads else None)
    if not sections or not isinstance(head, int):
        return
    partial = rope.get("partial_rotary_factor") or config_field(config, "partial_rotary_factor")
    half = int(head * (partial or 1.0)) // 2
    if half >= len(sections) and sum(sections) != half:
        rope["mrope_section"] = _split(half, list(sections))


def fit_latent_attention(config: Any) -> None:
    """Multi-head latent attention's sizes made to agree after shrinking: its keys and
    values come from the latent for every query head (as many key-value heads as query
    heads), its query-key head is the unrotated part and the rotated part together."""
    if not isinstance(config_field(config, "kv_lora_rank"), int):
        return
    heads = config_field(config, "num_attention_heads")
    nope, rope = config_field(config, "qk_nope_head_dim"), config_field(config, "qk_rope_head_dim")
    with contextlib.suppress(Exception):
        if isinstance(heads, int) and isinstance(config_field(config, "num_key_value_heads"), int):
            config.num_key_value_heads = heads
        if isinstance(nope, int) and isinstance(rope, int) and "qk_head_dim" in vars(config):
            config.qk_head_dim = nope + rope


def fit_parts(before: dict[str, Any], config: Any) -> None:
    """Lists of sizes that split the hidden size (Reformer's axial position embeddings'
    widths, which it checks sum to it) split the shrunk hidden size, in proportion."""
    change = _hidden_size_change(before, config)
    if change is None:
        return
    width, now = change
    for name, value in before.items():
        if "dim" in name and _int_list(value) and sum(value) == width and len(value) <= now:
            with contextlib.suppress(Exception):
                setattr(config, name, type(value)(_split(now, list(value))))


def fit_sub_widths(before: dict[str, Any], widths: dict[str, Any], config: Any) -> None:
    """Input widths that take a sub-config's hidden states (OmDet-Turbo's
    ``text_projection_in_dim``, its text encoder's width): a field named for an input
    width whose default is the default width of exactly one sub-config (``widths``:
    name -> its hidden size before shrinking) follows that sub-config's shrunk width."""
    for name, value in before.items():
        if not name.endswith(_INPUT_WIDTHS) or not isinstance(value, int):
            continue
        sources = [sub for sub, width in widths.items() if width == value]
        if len(sources) == 1:
            width = config_field(config_field(config, sources[0]), "hidden_size")
            if isinstance(width, int) and width != value:
                with contextlib.suppress(Exception):
                    setattr(config, name, width)


def fit_summed_widths(before: dict[str, Any], widths: dict[str, Any], config: Any) -> None:
    """A width that takes the config's hidden states and a sub-config's side by side
    (X-Codec 2's ``quantization_dim``: its acoustic and semantic widths concatenated),
    its default their default sum, follows their shrunk sum."""
    hidden = before.get("hidden_size")
    if not isinstance(hidden, int):
        return
    for name, value in before.items():
        if not name.endswith("_dim") or not isinstance(value, int) or isinstance(value, bool):
            continue
        sources = [s for s, w in widths.items() if isinstance(w, int) and w + hidden == value]
        if len(sources) != 1:
            continue
        now = config_field(config, "hidden_size")
        sub = config_field(config_field(config, sources[0]), "hidden_size")
        if isinstance(now, int) and isinstance(sub, int) and now + sub != value:
            with contextlib.suppress(Exception):
                setattr(config, name, now + sub)


def fit_aggregated_channels(before: dict[str, Any], config: Any) -> None:
    """Per-block channels whose last block takes the middle blocks' outputs concatenated
    (an ECAPA-TDNN speaker encoder's ``enc_channels``: 768 after three blocks of 256)
    keep that after capping: the last, the sum of the middle ones as capped."""
    for name, value in before.items():
        now = config_field(config, name)
        if not _int_list(value) or len(value) < 3 or value[-1] != sum(value[1:-1]):
            continue
        if _int_list(now) and len(now) == len(value) and now[-1] != sum(now[1:-1]):
            with contextlib.suppress(Exception):
                setattr(config, name, [*now[:-1], sum(now[1:-1])])


def fit_pixel_shuffle(config: Any) -> None:
    """A pixel shuffle folds the features of 1 / ratio² patches into one: the adapter
    after it takes the width over ratio² (Llama 4's vision ``intermediate_size``, which
    its encoder's MLP shares, and which its default config leaves at another width)."""
    ratio = config_field(config, "pixel_shuffle_ratio")
    width = config_field(config, "hidden_size")
    if isinstance(ratio, float) and 0 < ratio < 1 and isinstance(width, int):
        with contextlib.suppress(Exception):
            config.intermediate_size = round(width / ratio**2)


def fit_expert_groups(config: Any) -> None:
    """Grouped expert routing's groups made to divide the shrunk experts, each group
    holding at least two (a router scores a group by its two best experts), the groups
    kept for each token no more than the groups."""
    groups = config_field(config, "n_group")
    experts = next(
        (
            config_field(config, n)
            for n in ("n_routed_experts", "num_experts", "num_local_experts")
            if isinstance(config_field(config, n), int)
        ),
        None,
    )
    if not isinstance(groups, int) or not isinstance(experts, int) or groups < 1:
        return
    if experts % groups == 0 and experts // groups >= min(2, experts):
        return
    fitted = max(
        g for g in range(1, groups + 1) if experts % g == 0 and experts // g >= min(2, experts)
    )
    with contextlib.suppress(Exception):
        config.n_group = fitted
        kept = config_field(config, "topk_group")
        if isinstance(kept, int) and kept > fitted:
            config.topk_group = fitted


@functools.cache
def _mrope_default(config_module: str) -> Optional[tuple[int, ...]]:
    """The ``mrope_section`` the modeling file beside configuration module
    ``config_module`` falls back on, if its code reads one; equal axes where its code
    reads one with no fallback (`_MROPE_AXES`)."""
    origin = getattr(sys.modules.get(config_module), "__file__", None)
    if origin is None:
        return None
    path = Path(origin)
    modeling = path.with_name(path.name.replace("configuration_", "modeling_", 1))
    source = modeling.read_text() if modeling.exists() else ""
    found = _MROPE_DEFAULT.search(source)
    if found:
        return tuple(int(n) for n in found.group(1).split(","))
    return _MROPE_AXES if _MROPE_REQUIRED in source else None


def fit_scaled_patch(before: dict[str, int], config: Any, image: int) -> None:
    """A patch a model cuts from its input scaled by each of ``scaled_images_ratios``
    (DepthPro), no larger than the smallest scaled ``image``-pixel input: its
    ``patch_size`` that size, and the image size of each sub-config that encodes one
    patch (``before``: name -> its image size before shrinking, equal to the patch's)."""
    ratios, patch = config_field(config, "scaled_images_ratios"), config_field(config, "patch_size")
    if not isinstance(ratios, (list, tuple)) or not ratios or not isinstance(patch, int):
        return
    fitted = int(image * min(ratios))
    if patch <= fitted or fitted < 1:
        return
    with contextlib.suppress(Exception):
        config.patch_size = fitted
        for name, size in before.items():
            if size == patch:
                config_field(config, name).image_size = fitted


def fit_stage_heads(config: Any) -> None:
    """Per-stage attention heads (Swin's ``num_heads``, growing as its stages double the
    width) that the shrunk first-stage width (``embed_dim``) does not split evenly:
    divided by the first stage's, their ratios kept (each stage's heads then split its
    width, which doubles with them, evenly)."""
    width = config_field(config, "embed_dim")
    heads = config_field(config, "num_heads")
    if not isinstance(width, int) or not isinstance(heads, list) or not heads:
        return
    if not all(isinstance(h, int) and h > 0 for h in heads) or width % heads[0] == 0:
        return
    if all(h % heads[0] == 0 for h in heads):
        with contextlib.suppress(Exception):
            config.num_heads = [h // heads[0] for h in heads]


def fit_stage_widths(before: dict[str, Any], config: Any) -> None:
    """Per-stage widths (Hiera's ``embed_dim_per_stage``) whose first stage is the
    config's hidden size follow the shrunk hidden size in proportion: a stage that pools
    its queries changes width there, which widths capped alike would not."""
    change = _hidden_size_change(before, config)
    if change is None:
        return
    width, now = change
    for name, value in before.items():
        if (
            name.endswith("_dim_per_stage")
            and isinstance(value, (list, tuple))
            and value
            and value[0] == width
            and all(isinstance(v, int) and v * now % width == 0 for v in value)
        ):
            with contextlib.suppress(Exception):
                setattr(config, name, [v * now // width for v in value])


def mirrored_lists(config: Any) -> dict[tuple[str, str], list[int]]:
    """The integer lists of ``config``'s sub-configs, by (sub-config, field), before
    `fit_mirrored_lists` is given them back after shrinking."""
    found = {}
    for sub, inner in vars(config).items():
        if hasattr(inner, "to_dict") and hasattr(inner, "model_type"):
            for name, value in vars(inner).items():
                if _int_list(value):
                    found[sub, name] = list(value)
    return found


def fit_mirrored_lists(
    before: dict[str, Any], lists: dict[tuple[str, str], list[int]], config: Any
) -> None:
    """A list of sizes that repeats a sub-config's (``lists``: before shrinking), as is
    or reversed (SAM 2's ``backbone_channel_list``, its backbone's stage widths from the
    last), follows that list as shrunk."""
    for name, value in before.items():
        if not _int_list(value) or len(set(value)) < 2:
            continue
        for (sub, field), old in lists.items():
            new = config_field(config_field(config, sub), field)
            if not _int_list(new) or new == old:
                continue
            fitted = new if list(value) == old else new[::-1] if list(value) == old[::-1] else None
            if fitted is not None:
                with contextlib.suppress(Exception):
                    setattr(config, name, list(fitted))
                break


def fit_feature_sizes(images: dict[str, Any], config: Any) -> None:
    """Feature-map sizes given for the model's image (SAM 2's ``backbone_feature_sizes``,
    [height, width] per level) scaled as a sub-config's image size (``images``: name ->
    its size before shrinking) was shrunk, the levels' sizes staying whole."""
    ratios = {
        (config_field(config_field(config, n), "image_size"), size)
        for n, size in images.items()
        if isinstance(size, int) and config_field(config_field(config, n), "image_size") != size
    }
    if len(ratios) != 1:
        return
    (new, old), *_ = ratios
    if not isinstance(new, int) or not isinstance(old, int):
        return
    for inner in [config, *(v for v in vars(config).values() if hasattr(v, "to_dict"))]:
        for name, value in list(vars(inner).items()):
            if not name.endswith("feature_sizes") or not isinstance(value, list):
                continue
            flat = [s for level in value if isinstance(level, list) for s in level]
            if flat and all(isinstance(s, int) and s * new % old == 0 for s in flat):
                with contextlib.suppress(Exception):
                    setattr(inner, name, [[s * new // old for s in level] for level in value])


def _hidden_size_change(before: dict[str, Any], config: Any) -> Optional[tuple[int, int]]:
    """The hidden size before shrinking and after, or None where either is not an
    integer or shrinking left it as it was."""
    width, now = before.get("hidden_size"), config_field(config, "hidden_size")
    if not isinstance(width, int) or not isinstance(now, int) or width == now:
        return None
    return width, now


def _int_list(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) > 1
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )
