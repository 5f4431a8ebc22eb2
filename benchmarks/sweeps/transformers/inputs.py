"""Inputs for a transformers model class, built from its ``forward``'s signature and its
config: the transformers sweep tries them in turn until one runs eagerly.

Each candidate is one guess at what the class takes: its main input (``main_input_name``)
in the shapes its config implies (pixel values at the config's image size and channels,
a video's frames, audio samples, mel features of the length the encoder's positions
need), then every other argument ``forward`` requires, built from its name, and the
optional ones a class often cannot run without (decoder ids of an encoder-decoder, an
attention mask). Random values from a seeded generator; no hub access.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterator

from benchmarks.sweeps.transformers.class_inputs import SPECIAL
from benchmarks.sweeps.transformers.companion_inputs import (
    COMPANIONS,
    passed_through,
    with_companions,
)
from benchmarks.sweeps.transformers.constant_arguments import constants
from benchmarks.sweeps.transformers.input_tensors import as_int, find, Maker, SAMPLES, SEQUENCE


def _main(model: Any, make: Maker) -> Iterator[dict[str, Any]]:
    """The main input in the shapes the config implies, most likely first."""
    config = model.config
    parameters = inspect.signature(model.forward).parameters
    name = _main_name(model, parameters)
    if name == "input_ids":
        ids = make.ids()
        codebooks = as_int(find(config, "num_codebooks"), 0)
        if type(model).__name__.endswith("ForMultipleChoice"):
            # (batch, choices, sequence)
            yield {"input_ids": ids.unsqueeze(1).expand(1, 2, SEQUENCE).contiguous()}
        elif codebooks:
            # A decoder over audio codebooks takes (batch x codebooks, sequence).
            yield {"input_ids": make.ids().expand(codebooks, SEQUENCE).contiguous()}
        yield {"input_ids": ids}
        yield {"input_ids": ids, "pixel_values": make.pixels()}
        yield {"input_ids": ids, "attention_mask": make.torch.ones_like(ids)}
    elif name == "pixel_values":
        queried = make.ids_with_queries()
        if queried is not None and "input_ids" in parameters:
            # Text holding a placeholder for each query of the model's query former.
            yield {name: make.pixels(), "input_ids": queried}
            yield {name: make.video(), "input_ids": make.ids_with_queries(make.frames)}
        yield {name: make.pixels()}
        if getattr(config, "num_frames", None) or find(config, "num_frames"):
            yield {name: make.video()}
        yield {name: make.pixels(), "input_ids": make.ids()}
        yield {name: make.pixels(224)}
        yield {name: make.pixels(64)}
        yield {name: make.video()}
    elif name == "pixel_values_videos":
        yield {name: make.video()}
        yield {name: make.video(), "input_ids": make.ids()}
    elif name in ("input_values", "audio_values", "waveform"):
        yield {name: make.floats(1, SAMPLES // 10)}
        yield {name: make.floats(1, SAMPLES)}
        yield {name: make.floats(1, 1, SAMPLES // 10)}
        yield {name: make.floats(1, 1, SAMPLES)}
        yield {name: make.floats(1, SAMPLES // 10)}
        yield {name: make.floats(1, 1, SAMPLES)}
    elif name in ("input_features", "spectrogram", "audio_mel"):
        for features in make.features():
            yield {name: features}
    elif name == "past_values":
        # A time-series model: (batch, history, channels), the history the context and
        # the furthest lag the model looks back (its lagged features).
        length = as_int(find(config, "context_length"), SEQUENCE) + max(
            find(config, "lags_sequence") or [0]
        )
        channels = as_int(find(config, "num_input_channels") or find(config, "input_size"), 1)
        yield {name: make.floats(1, length, channels)}
        if channels == 1:
            yield {name: make.floats(1, length)}
    else:
        yield {name: make.floats(1, SEQUENCE, make.hidden)}
        yield {name: make.ids()}
    yield from _patch_inputs(parameters, make)


def _more_main(model: Any, make: Maker) -> Iterator[dict[str, Any]]:
    """Rarer layouts of the main input, tried after `_main`'s: a main input `COMPANIONS`
    knows; text with a video or with mel features beside it; a video with text; tiles of
    images (``aspect_ratio_ids``); features in the other layouts the config's widths
    imply; a generic input channels first, or as pixels or audio."""
    config = model.config
    parameters = inspect.signature(model.forward).parameters
    name = _main_name(model, parameters)
    if name in COMPANIONS:
        first = COMPANIONS[name](make, {})
        yield first
        if "input_ids" in parameters and "pixel_values" in parameters:
            # A policy reading a prompt and its cameras' images besides (PI0).
            yield {**first, "input_ids": make.ids(), "pixel_values": make.video()}
    if name == "input_ids":
        ids = make.ids()
        if "pixel_values" in parameters:
            yield {"input_ids": ids, "pixel_values": make.video()}
            # Text beside an image given as patches (SigLIP 2's).
            for patches in _patch_inputs(parameters, make):
                yield {"input_ids": ids, **patches}
            side = as_int(find(config, "max_img_size"), 0)
            if side:
                # Frames at the size the model pads them to (TVP's visual prompt).
                video = make.floats(1, make.frames, make.channels, side, side)
                yield {"input_ids": ids, "pixel_values": video}

        if "input_features" in parameters:
            for features in make.more_features():
                yield {"input_ids": ids, "input_features": features}
        if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
            # Decoder ids as long as the input ids: a head pooling the decoder's states at
            # the input's end-of-sequence tokens (T5's classifier).
            yield {"input_ids": ids, "decoder_input_ids": ids}
        total = as_int(find(config, "n_codes_total"), 0)
        if total:
            # Ids of every codebook of each step: (batch, sequence, codebooks) (Bark's
            # fine model, which embeds each codebook's ids and sums them).
            yield {"input_ids": make.ids(SEQUENCE * total).view(1, SEQUENCE, total)}
        if "inputs_embeds" in parameters:
            # A model that embeds no ids of its own (a talker, a text-to-unit encoder).
            yield {"inputs_embeds": make.floats(1, SEQUENCE, make.hidden)}
    elif name == "pixel_values":
        yield from _more_patches(parameters, make)
        grid = as_int(find(config, "num_patches"), 0)
        levels = find(config, "channel_multiplier")
        if grid and isinstance(levels, (list, tuple)) and levels:
            # An image the size a VQ-VAE's latent grid implies: its side times the
            # encoder's downsampling, a half at each level after the first (Janus').
            yield {name: make.pixels(grid * 2 ** (len(levels) - 1))}
        if "prompt_pixel_values" in parameters:
            # A prompt stacked above the image fills the config's size (SegGPT's).
            height, width = make.image
            yield {name: make.floats(1, make.channels, height // 2, width)}
        yield {name: make.video(), "input_ids": make.ids()}
        # A video tower that folds the frames into the batch (X-CLIP's).
        yield {name: make.video().flatten(0, 1)}
        if "aspect_ratio_ids" in parameters:
            tiles = as_int(find(config, "max_num_tiles"), 4)
            yield {name: make.pixels().expand(1, 1, tiles, -1, -1, -1).contiguous()}
    elif name in ("input_features", "spectrogram", "audio_mel", "input_values", "mel_spectrogram"):
        per_token = as_int(find(config, "samples_per_token"), 0)
        if per_token:
            # Audio a whole number of tokens long (an encoder embedding fixed spans).
            yield {name: make.floats(1, 4 * per_token)}
        for features in make.more_features():
            yield {name: features}
        # An encoder whose pre-net is left to the caller (SpeechT5's): hidden states.
        yield {name: make.floats(1, SEQUENCE, make.hidden)}
    elif name.endswith("_ids"):
        # Ids over audio codebooks: (batch, sequence, codebooks).
        codebooks = as_int(find(config, "num_codebooks"), 0)
        if codebooks:
            yield {name: make.ids(SEQUENCE * codebooks).view(1, SEQUENCE, codebooks)}
    elif name not in ("pixel_values_videos", "past_values", "audio_values", "waveform"):
        yield {name: make.floats(1, make.hidden, SEQUENCE)}
        width = as_int(find(config, "input_size"), 0)
        if width:
            # Features at the width the config names as its input's (Phi-4's audio).
            yield {name: make.floats(1, SEQUENCE, width)}
        yield {name: make.pixels()}
        yield {name: make.floats(1, 1, SAMPLES // 10)}
        yield {name: make.floats(1, 1, SAMPLES)}
        yield {name: make.floats(1, SAMPLES // 10)}
        channels = _first_conv_channels(model)
        if channels:
            # A feature map for a model that convolves it first (a neck or head taken
            # alone: UVDoc's bridge, PP-OCR's SVTR encoder), one row high, then square.
            yield {name: make.floats(1, channels, 1, SEQUENCE)}
            yield {name: make.floats(1, channels, SEQUENCE, SEQUENCE)}


def _first_conv_channels(model: Any) -> int:
    """The input channels of ``model``'s first 2-D convolution, or 0 where it has none."""
    import torch

    conv = next((m for m in model.modules() if isinstance(m, torch.nn.Conv2d)), None)
    return int(conv.in_channels) if conv is not None else 0


def _more_patches(parameters: Any, make: Maker) -> Iterator[dict[str, Any]]:
    """Patches of `Maker.grid_side`'s square grid in the layouts `_patch_inputs` does not
    try: each patch spanning two frames (a temporal patch the config leaves implicit),
    each patch an image of its own (channels, side, side), all of them one image's
    sequence (batch, patches, ...), or flattened without a grid (as many as the grid, or
    as an image of the config's size holds); last, each merged token's patches one
    channels-last image, the grid counted in merged tokens, or without a grid each patch
    a channels-last tube of the frames it spans."""
    pixels = "pixel_values" if "pixel_values" in parameters else next(iter(parameters))
    grid = next((n for n in parameters if n.endswith("grid_thw")), None)
    side = make.grid_side()
    count = side * side
    channels = as_int(find(make.config, "in_channels") or find(make.config, "num_channels"), 3)
    patch = as_int(find(make.config, "patch_size"), 14)
    if grid is not None:
        thw = make.torch.tensor([[1, side, side]])
        images = make.floats(count, channels, patch, patch)
        for layout in (
            make.floats(count, 2 * make.patch_width(temporal=False)),
            images,
            images.unsqueeze(0),
        ):
            yield {pixels: layout, grid: thw}
    width = make.patch_width(temporal=False)
    yield {pixels: make.floats(1, count, width)}
    # The patches of one image at the config's size.
    height, across = (side // patch for side in make.image)
    if height * across != count:
        yield {pixels: make.floats(1, height * across, width)}
    if grid is not None:
        # One channels-last image a merged token, the grid counted in merged tokens
        # (Inkling 2's).
        merge = as_int(find(make.config, "spatial_merge_size"), 2)
        tokens = side // merge
        merged = make.floats(tokens * tokens, patch * merge, patch * merge, channels)
        yield {pixels: merged, grid: make.torch.tensor([[1, tokens, tokens]])}
    else:
        # Each patch a channels-last tube of the frames it spans (Inkling's).
        frames = as_int(find(make.config, "temporal_patch_size"), 1)
        yield {pixels: make.floats(count, frames, patch, patch, channels)}


def _main_name(model: Any, parameters: Any) -> str:
    """The name of ``model``'s main input: its ``main_input_name``, or where ``forward``
    does not take that (a class inheriting the name from a base whose forward it does not
    share), forward's first argument."""
    name = getattr(model, "main_input_name", "input_ids")
    if isinstance(name, (list, tuple)):
        name = name[0]
    fixed = constants(model)
    if name not in parameters or name in fixed:
        # Not a Python number bound to the model (`constants`): the first tensor argument.
        name = next((n for n, p in parameters.items() if p.kind in _NAMED and n not in fixed), name)
    return str(name)


def _patch_inputs(parameters: Any, make: Maker) -> Iterator[dict[str, Any]]:
    """A vision tower fed flattened patches of a square grid (`Maker.grid_side`): with
    the grid (Qwen-VL's ``grid_thw``), with its shape and a patch mask (SigLIP 2's
    ``spatial_shapes``), or with each patch's position (``pixel_position_ids``)."""
    torch = make.torch
    pixels = "pixel_values" if "pixel_values" in parameters else next(iter(parameters))
    grid = next((n for n in parameters if n.endswith("grid_thw")), None)
    if grid is not None:
        patches, thw = make.patches()
        yield {pixels: patches, grid: thw}
    side = make.grid_side()
    count = side * side
    flat = make.floats(1, count, make.patch_width(temporal=False))
    if "spatial_shapes" in parameters:
        inputs = {pixels: flat, "spatial_shapes": torch.tensor([[side, side]])}
        if "pixel_attention_mask" in parameters:
            inputs["pixel_attention_mask"] = torch.ones(1, count, dtype=torch.long)
        yield inputs
    if "pixel_position_ids" in parameters:
        rows, columns = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        positions = torch.stack([columns.flatten(), rows.flatten()], dim=-1).unsqueeze(0)
        yield {pixels: flat, "pixel_position_ids": positions}


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def candidate_inputs(model: Any) -> Iterator[dict[str, Any]]:
    """Candidate keyword inputs for ``model``, in the order to try them.

    Each main input is completed with every argument ``forward`` requires, and decoder ids
    for an encoder-decoder; then tried again with an attention mask where ``forward``
    takes one, and with a noise input where it takes one (it would otherwise draw random
    numbers, which neither the runtime nor a diff can take). After those, the rarer main
    inputs' layouts (`_more_main`), and every candidate again with its companions
    (`companion_inputs`): last, so a class that runs on a plainer candidate keeps
    it.
    """
    parameters = inspect.signature(model.forward).parameters
    make = Maker(model.config)
    through = passed_through(model, parameters)
    seen: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    special = SPECIAL.get(type(model).__name__)
    if special is not None:
        # What no name or config field describes (`class_inputs`), first.
        candidate = special(make)
        seen.append(candidate)
        yield candidate
    for main in (*_main(model, make), *_more_main(model, make)):
        for candidate in _completed(model, main, parameters, make):
            if not any(_same(candidate, s) for s in seen):
                seen.append(candidate)
                yield candidate
            # The companion's guess for an argument a name alone guessed before.
            own = {k: v for k, v in candidate.items() if k in main or k not in COMPANIONS}
            later.append(with_companions(own, parameters, make, through))
    for candidate in later:
        if not any(_same(candidate, s) for s in seen):
            seen.append(candidate)
            yield candidate


def _completed(
    model: Any, main: dict[str, Any], parameters: Any, make: Maker
) -> Iterator[dict[str, Any]]:
    """``main`` completed with what ``forward`` requires (`candidate_inputs`)."""
    fixed = constants(model)
    required = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty and p.kind in _NAMED and name not in fixed
    ]
    inputs = {k: v for k, v in main.items() if k in parameters or _takes_kwargs(parameters)}
    if not inputs:
        return
    sequence = _sequence(inputs, model.config)
    for name in required:
        inputs.setdefault(name, make.by_name(name, sequence))
    if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        inputs.setdefault("decoder_input_ids", make.ids(4))
    if "noise_sequence" in parameters:
        channels = as_int(find(model.config, "model_in_channels"), 64)
        first = next(iter(main.values()))
        inputs["noise_sequence"] = make.floats(1, first.shape[1], channels)
    if "bbox" in parameters and "input_ids" in inputs:
        inputs.setdefault("bbox", make.by_name("bbox", sequence))
    # Without decoder ids too, where forward does not require them: a model that
    # shifts its input ids into decoder ids needs theirs to be as long.
    alone = None
    if "decoder_input_ids" in inputs and "decoder_input_ids" not in required:
        alone = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
    for candidate in (inputs, _with_mask(inputs, parameters), alone):
        if candidate is not None:
            yield candidate


def _takes_kwargs(parameters: Any) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _sequence(inputs: dict[str, Any], config: Any) -> int:
    """The sequence length the other inputs (masks, time features) take: the token ids',
    a time series' history, or a waveform's frames (its samples over the hop the config
    gives: a codec's semantic features, one frame for each of its acoustic ones)."""
    for name in ("input_ids", "past_values"):
        if name in inputs:
            return int(inputs[name].shape[1 if name == "past_values" else -1])
    waveform = inputs.get("input_values")
    hop = as_int(find(config, "encoder_hop_length") or find(config, "hop_length"), 0)
    if waveform is not None and waveform.dim() == 3 and hop:
        return max(1, int(waveform.shape[-1]) // hop)
    return SEQUENCE


def _with_mask(inputs: dict[str, Any], parameters: Any) -> dict[str, Any] | None:
    ids = inputs.get("input_ids")
    if ids is None or "attention_mask" in inputs or "attention_mask" not in parameters:
        return None
    import torch

    return {**inputs, "attention_mask": torch.ones_like(ids)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return list(a) == list(b) and all(a[k].shape == b[k].shape for k in a)
