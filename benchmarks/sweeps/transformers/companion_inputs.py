"""Companion inputs: ``forward`` arguments a transformers model class declares optional
(or types loosely) yet cannot run without, built from the argument's name and the config.

A model that takes ``visual_feats`` beside its token ids, retrieved documents beside a
question (``context_input_ids``), a Longformer's global attention, LUKE's entities, a
decision transformer's states and actions, a TimesFM series' padding and frequency: each
is one row of `COMPANIONS`, keyed by the argument's name, whose maker reads the sizes the
config gives (the visual feature width, the documents retrieved, the state and action
widths). A maker returns the tensors to add (the argument's, and where its shape ties
another input's, that input too), or nothing where the config does not say enough. The
makers of pixels, audio and regions are `media_inputs`'s.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from benchmarks.sweeps.transformers import media_inputs as media
from benchmarks.sweeps.transformers.input_tensors import as_int, find, Maker, SEQUENCE

# Entities of an entity-aware model (LUKE): two, for its entity-pair head.
ENTITIES = 2
# Class names an open-vocabulary detector looks for in an image.
_CLASSES = 2

Inputs = dict[str, Any]
Companion = Callable[[Maker, Inputs], Inputs]


def _documents(make: Maker) -> int:
    return as_int(find(make.config, "n_docs"), 5)


def _context_ids(make: Maker, inputs: Inputs) -> Inputs:
    """The retrieved documents, each one row (a RAG model without a retriever)."""
    return {"context_input_ids": make.ids().expand(_documents(make), SEQUENCE).contiguous()}


def _context_mask(make: Maker, inputs: Inputs) -> Inputs:
    mask = make.torch.ones(_documents(make), SEQUENCE, dtype=make.torch.long)
    return {"context_attention_mask": mask}


def _doc_scores(make: Maker, inputs: Inputs) -> Inputs:
    return {"doc_scores": make.floats(1, _documents(make))}


def _global_attention(make: Maker, inputs: Inputs) -> Inputs:
    """Global attention on the first token: a Longformer QA head otherwise looks for it
    at separator tokens random ids need not hold."""
    ids = inputs.get("input_ids")
    if ids is None:
        return {}
    mask = make.torch.zeros_like(ids)
    mask[..., 0] = 1
    return {"global_attention_mask": mask}


def _entity_ids(make: Maker, inputs: Inputs) -> Inputs:
    vocab = max(2, min(as_int(find(make.config, "entity_vocab_size"), 100), 100))
    ids = make.torch.randint(1, vocab, (1, ENTITIES), generator=make.generator)
    return {"entity_ids": ids}


def _entity_mask(make: Maker, inputs: Inputs) -> Inputs:
    return {"entity_attention_mask": make.torch.ones(1, ENTITIES, dtype=make.torch.long)}


def _entity_positions(make: Maker, inputs: Inputs) -> Inputs:
    """Each entity's mention: its first tokens, padded with -1 to the mention length."""
    mention = as_int(find(make.config, "max_mention_length"), 30)
    positions = make.torch.full((1, ENTITIES, mention), -1, dtype=make.torch.long)
    for entity in range(ENTITIES):
        positions[0, entity, :2] = make.torch.tensor([2 * entity, 2 * entity + 1])
    return {"entity_position_ids": positions}


def _entity_starts(make: Maker, inputs: Inputs) -> Inputs:
    starts = make.torch.arange(ENTITIES).mul(2).unsqueeze(0)
    return {"entity_start_positions": starts}


def _entity_ends(make: Maker, inputs: Inputs) -> Inputs:
    ends = make.torch.arange(ENTITIES).mul(2).add(1).unsqueeze(0)
    return {"entity_end_positions": ends}


def _decoder_ids(make: Maker, inputs: Inputs) -> Inputs:
    """Decoder ids: one row a codebook, where the decoder reads audio codebooks."""
    codebooks = as_int(find(make.config, "num_codebooks"), 1)
    return {"decoder_input_ids": make.ids(4).expand(codebooks, 4).contiguous()}


def _encoder_states(make: Maker, inputs: Inputs) -> Inputs:
    width = as_int(find(make.config, "encoder_hidden_size"), make.hidden)
    return {"encoder_hidden_states": make.floats(1, SEQUENCE, width)}


def _context_states(make: Maker, inputs: Inputs) -> Inputs:
    """A drafter's context: the target model's states at each layer it reads (DFlash),
    side by side."""
    layers = find(make.config, "target_layer_ids")
    count = len(layers) if isinstance(layers, (list, tuple)) and layers else 1
    return {"context_hidden_states": make.floats(1, SEQUENCE, count * make.hidden)}


def _states(make: Maker, inputs: Inputs) -> Inputs:
    return {"states": make.floats(1, SEQUENCE, as_int(find(make.config, "state_dim"), 17))}


def _actions(make: Maker, inputs: Inputs) -> Inputs:
    """Actions at the config's action width, over its action chunk where it has one."""
    config = make.config
    width = as_int(find(config, "act_dim") or find(config, "max_action_dim"), 4)
    return {"actions": make.floats(1, as_int(find(config, "chunk_size"), SEQUENCE), width)}


def _rewards(make: Maker, inputs: Inputs) -> Inputs:
    return {"rewards": make.floats(1, SEQUENCE, 1)}


def _returns_to_go(make: Maker, inputs: Inputs) -> Inputs:
    return {"returns_to_go": make.floats(1, SEQUENCE, 1)}


def _timesteps(make: Maker, inputs: Inputs) -> Inputs:
    return {"timesteps": make.torch.arange(SEQUENCE).unsqueeze(0)}


def _series_padding(make: Maker, inputs: Inputs) -> Inputs:
    """No padding in the history: zeros of its (batch, length)."""
    values = inputs.get("past_values")
    if values is None:
        return {}
    return {"past_values_padding": make.torch.zeros(values.shape[:2])}


def _frequency(make: Maker, inputs: Inputs) -> Inputs:
    """The series' frequency class, one a series: 0, the highest."""
    return {"freq": make.torch.zeros(1, 1, dtype=make.torch.long)}


def _marks(make: Maker, inputs: Inputs) -> Inputs:
    """Two questions, marked at the first two tokens (1-based), two options each."""
    return {"marks": make.torch.tensor([[1, 2]])}


def _num_options(make: Maker, inputs: Inputs) -> Inputs:
    return {"num_options": make.torch.tensor([[2, 2]])}


def _question_types(make: Maker, inputs: Inputs) -> Inputs:
    return {"question_type_ids": make.torch.zeros(1, 2, dtype=make.torch.long)}


def _state(make: Maker, inputs: Inputs) -> Inputs:
    """A robot's state vector, at the width the config pads states to."""
    return {"state": make.floats(1, as_int(find(make.config, "max_state_dim"), make.hidden))}


def _question_positions(make: Maker, inputs: Inputs) -> Inputs:
    """One question, at the second token (Splinter's span selection)."""
    return {"question_positions": make.torch.tensor([[1]])}


def _noise(make: Maker, inputs: Inputs) -> Inputs:
    """The flow's starting noise over the action chunk, given (the model would draw it,
    which neither the runtime nor a diff can take)."""
    chunk = as_int(find(make.config, "chunk_size"), 0)
    width = as_int(find(make.config, "max_action_dim"), 0)
    return {"noise": make.floats(1, chunk, width)} if chunk and width else {}


def _action_embeds(make: Maker, inputs: Inputs) -> Inputs:
    """The action expert's input: one embedding an action of the chunk, at the expert's
    width (PI0's DiT)."""
    chunk = as_int(find(make.config, "chunk_size"), SEQUENCE)
    expert = getattr(make.config, "dit_config", None)
    width = as_int(getattr(expert, "hidden_size", None), make.hidden)
    return {"action_embeds": make.floats(1, chunk, width)}


def _timestep(make: Maker, inputs: Inputs) -> Inputs:
    return {"timestep": make.torch.full((1,), 0.5)}


def _layout_boxes(make: Maker, inputs: Inputs) -> Inputs:
    """Detected layout boxes in [0, 1000] (x_min, y_min, x_max, y_max), and the mask of
    the valid ones, all of them (PP-DocLayout's reading order)."""
    corners = make.torch.randint(0, 500, (1, media.REGIONS, 2), generator=make.generator)
    boxes = make.torch.cat([corners, corners + 10], dim=-1).float()
    return {"boxes": boxes, "mask": make.torch.ones(1, media.REGIONS, dtype=make.torch.bool)}


def _timestep_embeds(make: Maker, inputs: Inputs) -> Inputs:
    """The flow timestep's embedding an action expert conditions its norms on, at the
    expert's width (PI0.5's, which its model passes through to the expert)."""
    expert = getattr(make.config, "dit_config", None)
    width = as_int(getattr(expert, "hidden_size", None), make.hidden)
    return {"timestep_embeds": make.floats(1, width)}


def _task_inputs(make: Maker, inputs: Inputs) -> Inputs:
    """The task prompt's token ids ("the task is semantic"), padded to the config's
    task length: a universal segmenter's task MLP takes them whole (OneFormer's)."""
    return {"task_inputs": make.ids(as_int(find(make.config, "task_seq_len"), SEQUENCE))}


def _classes(make: Maker, inputs: Inputs) -> Inputs:
    """Two class names to detect for the one image: their ids flattened over the batch,
    and how many belong to each image (OmDet-Turbo's ``classes_structure``)."""
    ids = make.ids().expand(_CLASSES, SEQUENCE).contiguous()
    return {
        "classes_input_ids": ids,
        "classes_attention_mask": make.torch.ones_like(ids),
        "classes_structure": make.torch.tensor([_CLASSES]),
    }


def _first_id(name: str) -> Companion:
    """The first entry of a table indexed by id (a speaker's, a language's)."""

    def make_id(make: Maker, inputs: Inputs) -> Inputs:
        return {name: make.torch.zeros(1, 1, dtype=make.torch.long)}

    return make_id


COMPANIONS: dict[str, Companion] = {
    "visual_feats": media.visual_feats,
    "visual_pos": media.visual_pos,
    "visual_embeds": media.visual_embeds,
    "visual_attention_mask": media.visual_mask,
    "region_to_phrase_position": media.region_to_phrase,
    "context_input_ids": _context_ids,
    "context_attention_mask": _context_mask,
    "doc_scores": _doc_scores,
    "global_attention_mask": _global_attention,
    "entity_ids": _entity_ids,
    "entity_attention_mask": _entity_mask,
    "entity_position_ids": _entity_positions,
    "entity_start_positions": _entity_starts,
    "entity_end_positions": _entity_ends,
    "decoder_input_ids": _decoder_ids,
    "encoder_hidden_states": _encoder_states,
    "context_hidden_states": _context_states,
    "target_sizes": media.target_sizes,
    "is_longer": media.is_longer,
    "states": _states,
    "actions": _actions,
    "rewards": _rewards,
    "returns_to_go": _returns_to_go,
    "timesteps": _timesteps,
    "past_values_padding": _series_padding,
    "freq": _frequency,
    "image_embeds_position_mask": media.image_positions,
    "input_features_mask": media.features_mask,
    "audio_mel_mask": media.mel_mask,
    "chunk_sample_lengths": media.chunk_lengths,
    "bool_masked_pos": media.masked_patches,
    "aspect_ratio_ids": media.aspect_ratio_ids,
    "aspect_ratio_mask": media.aspect_ratio_mask,
    "image_attention_mask": media.image_attention,
    "input_values": media.waveform,
    "pixel_values_videos": media.video,
    "flattened_patches": media.flattened_patches,
    "marks": _marks,
    "num_options": _num_options,
    "question_type_ids": _question_types,
    "state": _state,
    "merge_sizes": media.merge_sizes,
    "prompt_pixel_values": media.prompt_pixels,
    "prompt_masks": media.prompt_masks,
    "question_positions": _question_positions,
    "boxes": _layout_boxes,
    "pixel_attention_mask": media.camera_mask,
    "noise": _noise,
    "action_embeds": _action_embeds,
    "timestep": _timestep,
    "spkr_id": _first_id("spkr_id"),
    "lang_id": _first_id("lang_id"),
    "codes": media.codes,
    "task_inputs": _task_inputs,
    "timestep_embeds": _timestep_embeds,
    "classes_structure": _classes,
    "decoder_input_values": media.decoder_values,
}


# Companions added only where ``forward`` requires them: where optional, the class runs
# without them (an audio prompt beside a text prompt; a mask over patches that are not
# the pixels' own, SegGPT's over the prompt and the image stacked).
_WHEN_REQUIRED = frozenset({"input_values", "bool_masked_pos"})


# Companions a sub-model requires that a model's caller gives it through ``**kwargs``
# (the others a sub-model requires, its model makes itself: a Q-Former's image states).
_PASSED_THROUGH = frozenset({"timestep_embeds"})


def with_companions(
    inputs: Inputs, parameters: Any, make: Maker, through: frozenset[str] = frozenset()
) -> Inputs:
    """``inputs`` completed with every companion ``forward`` takes that they lack, and
    those of ``through`` (`passed_through`)."""
    full = dict(inputs)
    required = inspect.Parameter("_", inspect.Parameter.KEYWORD_ONLY)
    wanted = {**parameters, **{name: required for name in through}}
    for name, parameter in wanted.items():
        optional = parameter.default is not inspect.Parameter.empty
        if name not in COMPANIONS or name in full or (optional and name in _WHEN_REQUIRED):
            continue
        made = COMPANIONS[name](make, full)
        full.update({k: v for k, v in made.items() if k in wanted})
    return full


def passed_through(model: Any, parameters: Any) -> frozenset[str]:
    """Companions a sub-model of ``model`` requires (`_PASSED_THROUGH`) that ``forward``
    does not declare and passes on through its ``**kwargs`` (PI0.5's action expert's
    timestep embedding): none where ``forward`` takes no ``**kwargs``."""
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return frozenset()
    found = set()
    for child in model.children():
        if not hasattr(child, "config"):
            continue
        for name, p in inspect.signature(child.forward).parameters.items():
            if p.default is inspect.Parameter.empty and name in _PASSED_THROUGH:
                found.add(name)
    return frozenset(found - set(parameters))
