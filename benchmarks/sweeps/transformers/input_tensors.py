"""Tensors for a transformers model's inputs, sized from its config: token ids, pixels,
video frames, mel features, flattened vision patches, and a tensor for a ``forward``
argument from its name. Random values from one seeded generator a model, so a class's
inputs are the same from run to run; no hub access.
"""

from __future__ import annotations

from typing import Any, Iterator

from benchmarks.sweeps.transformers.unset_fields import config_tree

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
    "asr_config",
    # A text-to-speech model's acoustic model beside its vocoder (FastSpeech 2's).
    "model_config",
)


# Config fields naming the width of one frame of features a model takes (besides its mel
# bins): a feature projection's input, the features stacked per frame.
_FEATURE_WIDTHS = (
    "feature_projection_input_dim",
    "input_dim",
    "input_feat_per_channel",
    "input_feat_size",
    "n_mels",
    "mel_dim",
)

# Residue types a protein folding model's ids index: the 20 amino acids and unknown (X).
_RESIDUE_TYPES = 21

# Config fields naming the token that stands for an image's (a video's) features.
_QUERY_TOKENS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")

# The model type of a config wrapping a timm model.
_TIMM_WRAPPER = "timm_wrapper"

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


def as_int(value: Any, default: int) -> int:
    """``value`` as an int (a list's last item), or ``default`` where it is not a number."""
    if isinstance(value, (list, tuple)) and value:
        value = value[-1]
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


def _timm_image_size(config: Any) -> Any:
    """The image size of the first timm model ``config``'s tree wraps (a video encoder's
    vision tower): its ``img_size`` argument, else its pretrained config's input size (a
    ViT's position table fixes it); None where it wraps none, or timm does not load."""
    for inner in config_tree(config):
        if getattr(inner, "model_type", None) != _TIMM_WRAPPER:
            continue
        size = (getattr(inner, "model_args", None) or {}).get("img_size")
        if size is not None:
            return size
        try:
            import timm

            return list(timm.get_pretrained_cfg(inner.architecture).input_size[-2:])
        except Exception:
            return None
    return None


class Maker:
    """Tensors for one model: its config's sizes, one seeded generator."""

    def __init__(self, config: Any) -> None:
        import torch

        self.torch = torch
        self.config = config
        self.generator = torch.Generator().manual_seed(1)
        vocab = as_int(find(config, "vocab_size"), 100)
        if getattr(config, "is_folding_model", False):
            # A folding model's ids are residue types, not its language model's tokens.
            vocab = _RESIDUE_TYPES
        self.vocab = max(2, min(vocab, 100))
        self.channels = as_int(find(config, "num_channels"), 3)
        size = find(config, "image_size") or _timm_image_size(config)
        if isinstance(size, dict):
            size = size.get("height") or size.get("shortest_edge")
        pair = size if isinstance(size, (list, tuple)) and len(size) == 2 else (size, size)
        self.image = tuple(as_int(side, 64) for side in pair)
        self.frames = as_int(find(config, "num_frames"), 2)
        self.hidden = as_int(find(config, "hidden_size") or find(config, "d_model"), 32)

    def ids(self, length: int = SEQUENCE) -> Any:
        """Token ids, ending in the end-of-sequence token where the config has one (a
        sequence classifier pooling at it needs one)."""
        ids = self.torch.randint(1, self.vocab, (1, length), generator=self.generator)
        eos = find(self.config, "eos_token_id")
        if isinstance(eos, int) and 0 <= eos < as_int(find(self.config, "vocab_size"), 0):
            ids[:, -1] = eos
        return ids

    def ids_with_queries(self, frames: int = 1) -> Any:
        """Token ids led by one image (or video) token a query of the model's query former
        (BLIP-2, InstructBLIP) for each of ``frames`` frames, where the config names both;
        else None."""
        tokens = (find(self.config, field) for field in _QUERY_TOKENS)
        token = next((t for t in tokens if t is not None), None)
        queries = as_int(find(self.config, "num_query_tokens"), 0)
        if not isinstance(token, int) or not queries:
            return None
        ids = self.ids()
        return self.torch.cat([self.torch.full((1, queries * frames), token), ids], dim=1)

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
        bins = as_int(find(self.config, "num_mel_bins") or find(self.config, "feature_size"), 80)
        dim = as_int(find(self.config, "input_feat_per_channel"), bins)
        positions = as_int(find(self.config, "max_source_positions"), 0)
        if positions:
            yield self.floats(1, bins, 2 * positions)
        yield self.floats(1, bins, 64)
        yield self.floats(1, 16, dim)
        yield self.floats(1, bins, 3000)
        yield self.floats(16, dim)

    def feature_widths(self) -> set[int]:
        """The widths one frame of features may have: the config's mel bins, a
        projection's input, frames stacked into one, twice and four times the bins."""
        config = self.config
        bins = as_int(find(config, "num_mel_bins") or find(config, "feature_size"), 80)
        widths = {bins}
        for field in _FEATURE_WIDTHS:
            width = as_int(find(config, field), 0)
            if width:
                widths.add(width)
        stacked = as_int(find(config, "num_stacked_frames"), 0)
        if stacked:
            widths.add(bins * stacked)
        # Frames stacked in pairs, or with their deltas, or both (Granite Speech 5's
        # extractor), where the config does not say.
        widths.update((2 * bins, 4 * bins))
        return widths

    def more_features(self) -> Iterator[Any]:
        """Mel features in the layouts `features` does not try: (1, frames, width) and
        (1, width, frames) for each of `feature_widths`, and (1, 1, frames, bins), a
        spectrogram as a one-channel image (CLAP, AST). The frames: the config's input
        length, a multiple of its attention window, or 64."""
        config = self.config
        bins = as_int(find(config, "num_mel_bins") or find(config, "feature_size"), 80)
        widths = self.feature_widths()
        window = as_int(find(config, "n_window"), 0)
        frames = as_int(find(config, "max_length"), 0) or (2 * window if window else 64)
        for width in sorted(widths):
            yield self.floats(1, frames, width)
        for width in sorted(widths):
            yield self.floats(1, width, frames)
        yield self.floats(1, 1, frames, bins)
        spec = as_int(find(config, "spec_size"), 0)
        if spec:
            yield self.floats(1, 1, spec * 4, bins)

    def patch_width(self, *, temporal: bool = True) -> int:
        """The values of one flattened patch: channels x patch side squared (x the frames
        a patch spans, where ``temporal``)."""
        config = self.config
        frames = as_int(find(config, "temporal_patch_size"), 1) if temporal else 1
        return (
            as_int(find(config, "in_channels") or find(config, "num_channels"), 3)
            * frames
            * as_int(find(config, "patch_size"), 14) ** 2
        )

    def grid_side(self) -> int:
        """The side of a square patch grid a vision tower merges (twice its merge size)."""
        return 2 * as_int(find(self.config, "spatial_merge_size"), 2)

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
        if name == "pixel_values_videos":
            return self.video()
        if "pixel_values" in name:
            return self.pixels()
        if name.endswith("time_features"):
            return self.floats(1, sequence, as_int(find(self.config, "num_time_features"), 1))
        if name.endswith(("_values", "_features", "_embeds", "_states", "hidden_states")):
            return self.floats(1, sequence, self.hidden)
        return self.floats(1, sequence, self.hidden)
