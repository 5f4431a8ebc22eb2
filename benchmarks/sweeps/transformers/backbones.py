"""Backbone sub-configs the transformers sweep builds a model from: the one a config
class declares where its constructor builds another, and a neck's per-stage input
channels kept equal to the channels of the stages the (shrunk) backbone gives out.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from benchmarks.sweeps.transformers.unset_fields import config_field, modeling_source

# A timm backbone is replaced by the sweep's own (`config_levels._own_backbone`).
_TIMM = "timm_backbone"
# Suffix of a list field giving a neck's input channels, one per backbone stage out.
_STAGE_CHANNELS = "list_out_channels"
# A model's count of a per-stage list of its backbone config: it takes a feature map
# from each stage (the stages out are the config's own to agree with, and excluded).
_PER_STAGE = re.compile(r"len\(config\.backbone_config\.(\w+)\)")
_OUT_FIELDS = frozenset({"out_indices", "out_features"})


def declared_sub_configs(config: Any) -> None:
    """Each sub-config of ``config`` its constructor builds of another model type than
    the one its class declares (``sub_configs_defaults``: a detector whose constructor
    falls back on a recognition backbone, whose single strided-by-rows stage out its
    neck cannot take) set to the declared one, built with the declared arguments, where
    that one has every field the model's code reads off the sub-config (a model written
    for the built one's fields keeps it)."""
    from transformers import CONFIG_MAPPING

    source = modeling_source(type(config).__module__)
    for name, spec in (getattr(type(config), "sub_configs_defaults", None) or {}).items():
        declared_type = getattr(spec, "model_type", None)
        current = config_field(config, name)
        built_type = getattr(current, "model_type", None)
        if (
            not declared_type
            or built_type in (None, _TIMM, declared_type)
            or declared_type not in CONFIG_MAPPING
        ):
            continue
        try:
            declared = CONFIG_MAPPING[declared_type](**dict(getattr(spec, "init_kwargs", {})))
        except Exception:
            continue
        read = set(re.findall(rf"config\.{name}\.(\w+)", source))
        if all(hasattr(declared, field) for field in read):
            with contextlib.suppress(Exception):
                setattr(config, name, declared)


def fit_every_stage_out(config: Any) -> None:
    """A backbone whose model takes a feature map from each of its stages (its code
    counts a per-stage list of the backbone config: UVDoc's head, which concatenates
    them, takes as many channels as ``stage_configs`` has entries) gives every stage out,
    as the model's checkpoints have it (a backbone config's default gives only the
    last)."""
    backbone = config_field(config, "backbone_config")
    stages = list(config_field(backbone, "stage_names") or [])[1:]
    if not stages or config_field(backbone, "out_features") == stages:
        return
    source = modeling_source(type(config).__module__)
    for field in set(_PER_STAGE.findall(source)) - _OUT_FIELDS:
        value = config_field(backbone, field)
        if isinstance(value, (list, tuple)) and len(value) == len(stages):
            with contextlib.suppress(Exception):
                backbone._out_features = stages
                backbone._out_indices = list(range(1, len(stages) + 1))
            return


def fit_stage_channels(config: Any) -> None:
    """A neck's per-stage input channels (``layer_list_out_channels``: one per backbone
    stage out, which a neck that takes the feature maps as they come convolves) set to
    the channels of the stages ``config``'s backbone gives out, read off the backbone
    built on the meta device (its shrunk widths decide them)."""
    backbone = config_field(config, "backbone_config")
    names = [n for n, v in vars(config).items() if n.endswith(_STAGE_CHANNELS)]
    if backbone is None or not names or getattr(backbone, "model_type", None) == _TIMM:
        return
    channels = _out_channels(backbone)
    for name in names:
        value = getattr(config, name)
        if (
            channels
            and isinstance(value, (list, tuple))
            and len(value) == len(channels)
            and list(value) != channels
        ):
            with contextlib.suppress(Exception):
                setattr(config, name, type(value)(channels))


def _out_channels(backbone: Any) -> list[int]:
    """The channels of the stages backbone config ``backbone`` gives out, or none where
    its backbone does not build."""
    import torch
    from transformers import AutoBackbone

    try:
        with torch.device("meta"):
            model = AutoBackbone.from_config(backbone)
        return [int(c) for c in model.channels]
    except Exception:
        return []
