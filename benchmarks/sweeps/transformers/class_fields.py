"""Fields a transformers model class needs set in the config it is built from, which
its config class's defaults leave otherwise: what the class's own checkpoints set (a
flag, a layer count it needs over the shrunk one, widths that must differ).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

# EdgeTAM's checkpoints' RepViT backbone and its channels (timm's model is not shrunk):
# the default config misspells the field (``archirecture``), leaving timm's ResNet-50.
_EDGETAM = {
    "backbone_config.architecture": "repvit_m1",
    "backbone_channel_list": [384, 192, 96, 48],
}
# PerceptionLM's checkpoints' PE tower, two layers 64 wide: its projector reads the
# tower's width off its timm arguments, which the default config leaves unset.
_PE_TOWER = {
    "architecture": "vit_pe_core_large_patch14_336",
    "model_args": {"embed_dim": 64, "depth": 2, "img_size": [28, 28]},
}
# Flags a model class checks its config for, which the config class's defaults leave
# off: what the class's own checkpoints set. Keyed by class name as a last resort: the
# class is what needs them, and no config field says so.
CLASS_FIELDS: dict[str, dict[str, Any]] = {
    "EsmForProteinFolding": {"is_folding_model": True},
    "ReformerModelWithLMHead": {"is_decoder": True},
    "T5GemmaEncoderModel": {"is_encoder_decoder": False},
    # One image pair (NLVR2), each image a modality type of its own after the text's,
    # as its checkpoint has it.
    "ViltForImagesAndTextClassification": {"num_images": 2, "modality_type_vocab_size": 3},
    # The preprocessors' channels (261, 405) are the cross-attention's query-key width: one
    # cross-attention head, as the checkpoints have it.
    "PerceiverForImageClassificationFourier": {"num_cross_attention_heads": 1},
    "PerceiverForMultimodalAutoencoding": {"num_cross_attention_heads": 1},
    # Their text path runs the Q-Former on text, as their checkpoint (ITM) has it.
    "Blip2TextModelWithProjection": {"qformer_config.use_qformer_text_input": True},
    "Blip2ForImageTextRetrieval": {"qformer_config.use_qformer_text_input": True},
    # A drafter reusing its target's keys and values has no per-layer inputs of its own,
    # as its checkpoints' text config has it (its config class validates so).
    "Gemma4AssistantForCausalLM": {
        "text_config": {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
    },
    # Its decode head takes four backbone features: four layers, each one's output.
    "BeitForSemanticSegmentation": {"out_indices": [1, 2, 3, 4], "num_hidden_layers": 4},
    # Their config's default lists no feature levels (`projector_scale_factors`, empty),
    # from which the encoder then has nothing to take: one level at the backbone's own
    # scale, as the smallest checkpoints have it.
    "LwDetrModel": {"projector_scale_factors": [1.0]},
    "LwDetrForObjectDetection": {"projector_scale_factors": [1.0]},
    # Their decoder builds one layer fewer than its count and reads the last one's
    # output: two, the fewest that leave it one.
    "OneFormerModel": {"decoder_layers": 2},
    "OneFormerForUniversalSegmentation": {"decoder_layers": 2},
    # Its decoder projects the task's features to its width only where the two differ,
    # as in its checkpoints (512 and 256), and reads the projection whatever the widths:
    # text and class embeddings twice as wide as the shrunk decoder.
    "OmDetTurboForObjectDetection": {
        "text_config": {"hidden_size": 64},
        "text_projection_in_dim": 64,
        "text_projection_out_dim": 64,
        "class_embed_dim": 64,
    },
    # Its decoder takes the states of four distinct encoder layers, at or after the one
    # merging the prompt's and the image's streams: five layers, merged after the first.
    "SegGptForImageSegmentation": {
        "num_hidden_layers": 5,
        "merge_index": 1,
        "intermediate_hidden_state_indices": [1, 2, 3, 4],
    },
    # A timm backbone names its timm model: the config's documented example's.
    "TimmBackbone": {"backbone": "resnet50"},
    "EdgeTamModel": {f"vision_config.{name}": value for name, value in _EDGETAM.items()},
    "EdgeTamVisionModel": _EDGETAM,
    "PerceptionLMModel": {"vision_config": _PE_TOWER},
    "PerceptionLMForConditionalGeneration": {"vision_config": _PE_TOWER},
}


def default_config(model_class: type) -> Any:
    """``model_class``'s config class's default instance, with the flags the class needs
    (`CLASS_FIELDS`; a dotted name is a sub-config's field) and the sub-configs its
    class declares (`declared_sub_configs`)."""
    from benchmarks.sweeps.transformers.backbones import declared_sub_configs

    fields = CLASS_FIELDS.get(model_class.__name__, {})
    config = model_class.config_class(**{n: v for n, v in fields.items() if "." not in n})
    declared_sub_configs(config)
    return keep_class_fields(model_class, config)


def keep_class_fields(model_class: type, config: Any) -> Any:
    """``config`` (shrunk) with the fields ``model_class`` needs (`CLASS_FIELDS`) set
    again: a layer count the class needs is kept over the shrunk one (a mapping for a
    sub-config sets its fields)."""
    for path, value in CLASS_FIELDS.get(model_class.__name__, {}).items():
        *parents, name = path.split(".")
        target = config
        for parent in parents:
            target = getattr(target, parent, None)
        inner = getattr(target, name, None)
        if isinstance(value, dict) and hasattr(inner, "to_dict"):
            target, pairs = inner, value.items()
        else:
            pairs = [(name, value)]
        for field, setting in pairs:
            if target is not None:
                with contextlib.suppress(Exception):
                    setattr(target, field, copy.deepcopy(setting))
    return config
