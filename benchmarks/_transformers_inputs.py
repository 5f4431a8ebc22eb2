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

# Sequence length of token inputs and of generic feature sequences.
SEQUENCE = 8
# Audio samples: a tenth of this first (a wav2vec2-style feature encoder's strides take
# 400), then all of it (an x-vector's TDNN context needs more).
SAMPLES = 16_000
_SUB_CONFIGS = (
    "text_config",
    "vision_config",
    "audio_config",
    "encoder_config",
    "decoder_config",
    "encoder",
    "decoder",
    "backbone_config",
    "speech_config",
)


# Suffixes of ``forward`` arguments that take integers (token ids, indices).
_INTEGER_SUFFIXES = ("_ids", "_idx", "_index", "_indices")


def find(config: Any, name: str) -> Any:
    """Config field ``name``, or a sub-config's (text, vision, audio, ...)."""
    value = getattr(config, name, None)
    if value is not None:
        return value
    for sub in _SUB_CONFIGS:
        inner = getattr(config, sub, None)
        if inner is not None and not isinstance(inner, (int, float, str, bool)):
            value = getattr(inner, name, None)
            if value is not None:
                return value
    return None


def _int(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)) and value:
        value = value[-1]
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


class _Maker:
    """Tensors for one model: its config's sizes, one seeded generator."""

    def __init__(self, config: Any) -> None:
        import torch

        self.torch = torch
        self.config = config
        self.generator = torch.Generator().manual_seed(1)
        vocab = _int(find(config, "vocab_size"), 100)
        self.vocab = max(2, min(vocab, 100))
        self.channels = _int(find(config, "num_channels"), 3)
        size = find(config, "image_size")
        if isinstance(size, dict):
            size = size.get("height") or size.get("shortest_edge")
        pair = size if isinstance(size, (list, tuple)) and len(size) == 2 else (size, size)
        self.image = tuple(_int(side, 64) for side in pair)
        self.frames = _int(find(config, "num_frames"), 2)
        self.hidden = _int(find(config, "hidden_size") or find(config, "d_model"), 32)

    def ids(self, length: int = SEQUENCE) -> Any:
        """Token ids, ending in the end-of-sequence token where the config has one (a
        sequence classifier pooling at it needs one)."""
        ids = self.torch.randint(1, self.vocab, (1, length), generator=self.generator)
        eos = find(self.config, "eos_token_id")
        if isinstance(eos, int) and 0 <= eos < _int(find(self.config, "vocab_size"), 0):
            ids[:, -1] = eos
        return ids

    def floats(self, *shape: int) -> Any:
        return self.torch.randn(*shape, generator=self.generator)

    def pixels(self, side: int | None = None) -> Any:
        height, width = (side, side) if side else self.image
        return self.floats(1, self.channels, height, width)

    def video(self) -> Any:
        return self.floats(1, self.frames, self.channels, *self.image)

    def features(self) -> Iterator[Any]:
        """Mel features: (1, bins, frames) at the length the encoder's positions take
        (Whisper), then the usual other layouts."""
        bins = _int(find(self.config, "num_mel_bins") or find(self.config, "feature_size"), 80)
        dim = _int(find(self.config, "input_feat_per_channel"), bins)
        positions = _int(find(self.config, "max_source_positions"), 0)
        if positions:
            yield self.floats(1, bins, 2 * positions)
        yield self.floats(1, bins, 64)
        yield self.floats(1, 16, dim)
        yield self.floats(1, bins, 3000)
        yield self.floats(16, dim)

    def patch_width(self, *, temporal: bool = True) -> int:
        """The values of one flattened patch: channels x patch side squared (x the frames
        a patch spans, where ``temporal``)."""
        config = self.config
        frames = _int(find(config, "temporal_patch_size"), 1) if temporal else 1
        return (
            _int(find(config, "in_channels") or find(config, "num_channels"), 3)
            * frames
            * _int(find(config, "patch_size"), 14) ** 2
        )

    def grid_side(self) -> int:
        """The side of a square patch grid a vision tower merges (twice its merge size)."""
        return 2 * _int(find(self.config, "spatial_merge_size"), 2)

    def patches(self) -> tuple[Any, Any]:
        """A Qwen-VL-style vision tower's inputs: flattened patches of a square grid of one
        frame (`grid_side`), and that grid (``grid_thw``)."""
        side = self.grid_side()
        grid = self.torch.tensor([[1, side, side]])
        return self.floats(side * side, self.patch_width()), grid

    def by_name(self, name: str, sequence: int) -> Any:
        """A tensor for ``forward`` argument ``name``: ids, a mask, pixels, features."""
        torch = self.torch
        if name.endswith("grid_thw"):
            return self.patches()[1]
        if name in ("bbox",):
            corners = torch.randint(0, 500, (1, sequence, 2), generator=self.generator)
            return torch.cat([corners, corners + 10], dim=-1)
        if name.endswith(_INTEGER_SUFFIXES) or name in ("codes", "code", "labels"):
            return self.ids(sequence)
        if name == "pixel_mask":
            return torch.ones(1, *self.image, dtype=torch.long)
        if "mask" in name:
            return torch.ones(1, sequence, dtype=torch.long)
        if "pixel_values" in name:
            return self.pixels()
        if name.endswith("time_features"):
            return self.floats(1, sequence, _int(find(self.config, "num_time_features"), 1))
        if name.endswith(("_values", "_features", "_embeds", "_states", "hidden_states")):
            return self.floats(1, sequence, self.hidden)
        return self.floats(1, sequence, self.hidden)


def _main(model: Any, make: _Maker) -> Iterator[dict[str, Any]]:
    """The main input in the shapes the config implies, most likely first."""
    config = model.config
    parameters = inspect.signature(model.forward).parameters
    name = getattr(model, "main_input_name", "input_ids")
    if isinstance(name, (list, tuple)):
        name = name[0]
    if name not in parameters:
        # A class that inherits its main input's name from a base it does not share
        # its forward with: forward's first argument.
        name = next((n for n, p in parameters.items() if p.kind in _NAMED), name)
    if name == "input_ids":
        ids = make.ids()
        codebooks = _int(find(config, "num_codebooks"), 0)
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
    elif name in ("input_features", "spectrogram", "audio_mel"):
        for features in make.features():
            yield {name: features}
    elif name == "past_values":
        # A time-series model: (batch, history, channels), the history the context and
        # the furthest lag the model looks back (its lagged features).
        length = _int(find(config, "context_length"), SEQUENCE) + max(
            find(config, "lags_sequence") or [0]
        )
        channels = _int(find(config, "num_input_channels") or find(config, "input_size"), 1)
        yield {name: make.floats(1, length, channels)}
        if channels == 1:
            yield {name: make.floats(1, length)}
    else:
        yield {name: make.floats(1, SEQUENCE, make.hidden)}
        yield {name: make.ids()}
    yield from _patch_inputs(parameters, make)


def _patch_inputs(parameters: Any, make: _Maker) -> Iterator[dict[str, Any]]:
    """A vision tower fed flattened patches of a square grid (`_Maker.grid_side`): with
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
    numbers, which neither the runtime nor a diff can take).
    """
    parameters = inspect.signature(model.forward).parameters
    required = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    make = _Maker(model.config)
    seen: list[dict[str, Any]] = []
    for main in _main(model, make):
        inputs = {k: v for k, v in main.items() if k in parameters or _takes_kwargs(parameters)}
        if not inputs:
            continue
        sequence = _sequence(inputs)
        for name in required:
            inputs.setdefault(name, make.by_name(name, sequence))
        if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
            inputs.setdefault("decoder_input_ids", make.ids(4))
        if "noise_sequence" in parameters:
            channels = _int(find(model.config, "model_in_channels"), 64)
            (first,) = main.values()
            inputs["noise_sequence"] = make.floats(1, first.shape[1], channels)
        if "bbox" in parameters and "input_ids" in inputs:
            inputs.setdefault("bbox", make.by_name("bbox", sequence))
        # Without decoder ids too, where forward does not require them: a model that
        # shifts its input ids into decoder ids needs theirs to be as long.
        alone = None
        if "decoder_input_ids" in inputs and "decoder_input_ids" not in required:
            alone = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        for candidate in (inputs, _with_mask(inputs, parameters), alone):
            if candidate is not None and not any(_same(candidate, s) for s in seen):
                seen.append(candidate)
                yield candidate


def _takes_kwargs(parameters: Any) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _sequence(inputs: dict[str, Any]) -> int:
    """The sequence length the other inputs (masks, time features) take: the token ids',
    or a time series' history."""
    for name in ("input_ids", "past_values"):
        if name in inputs:
            return int(inputs[name].shape[1 if name == "past_values" else -1])
    return SEQUENCE


def _with_mask(inputs: dict[str, Any], parameters: Any) -> dict[str, Any] | None:
    ids = inputs.get("input_ids")
    if ids is None or "attention_mask" in inputs or "attention_mask" not in parameters:
        return None
    import torch

    return {**inputs, "attention_mask": torch.ones_like(ids)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return list(a) == list(b) and all(a[k].shape == b[k].shape for k in a)
