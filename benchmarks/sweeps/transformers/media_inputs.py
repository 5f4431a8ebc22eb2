"""Companion inputs of pixels, audio and regions (`companion_inputs`): the
tensors a model takes beside its image, video, waveform or features, each sized from the
main input it accompanies (its frames, its patches, its images) and from the config.
"""

from __future__ import annotations

from typing import Any

from benchmarks.sweeps.transformers.input_tensors import as_int, find, Maker, SAMPLES, SEQUENCE

# Regions (boxes) of a model fed region features (LXMERT, VisualBERT).
REGIONS = 4

Inputs = dict[str, Any]


def _ids_length(inputs: Inputs) -> int:
    """The token ids' length, or the default sequence's where there are none."""
    ids = inputs.get("input_ids")
    return int(ids.shape[-1]) if ids is not None else SEQUENCE


def visual_feats(make: Maker, inputs: Inputs) -> Inputs:
    """Region features at the config's visual feature width."""
    width = as_int(find(make.config, "visual_feat_dim"), make.hidden)
    return {"visual_feats": make.floats(1, REGIONS, width)}


def visual_pos(make: Maker, inputs: Inputs) -> Inputs:
    """Each region's box, coordinates in [0, 1), at the config's position width."""
    width = as_int(find(make.config, "visual_pos_dim"), 4)
    boxes = make.torch.rand(1, REGIONS, width, generator=make.generator)
    return {"visual_pos": boxes}


def visual_embeds(make: Maker, inputs: Inputs) -> Inputs:
    """Region embeddings at the config's visual embedding width."""
    width = as_int(find(make.config, "visual_embedding_dim"), make.hidden)
    return {"visual_embeds": make.floats(1, REGIONS, width)}


def visual_mask(make: Maker, inputs: Inputs) -> Inputs:
    """Every region valid."""
    return {"visual_attention_mask": make.torch.ones(1, REGIONS, dtype=make.torch.long)}


def region_to_phrase(make: Maker, inputs: Inputs) -> Inputs:
    """Each token and region's phrase: one phrase, spanning text and regions."""
    length = _ids_length(inputs) + REGIONS
    return {"region_to_phrase_position": make.torch.ones(1, length, dtype=make.torch.long)}


def target_sizes(make: Maker, inputs: Inputs) -> Inputs:
    """Each image's patch grid (height, width): the pixels' sides over the patch side."""
    pixels = inputs.get("pixel_values")
    if pixels is None or pixels.dim() != 4:
        return {}
    patch = as_int(find(make.config, "patch_size"), 14)
    sides = [int(pixels.shape[-2]) // patch, int(pixels.shape[-1]) // patch]
    return {"target_sizes": make.torch.tensor([sides], dtype=make.torch.int32)}


def is_longer(make: Maker, inputs: Inputs) -> Inputs:
    """No clip longer than the model's window (CLAP fuses longer ones)."""
    return {"is_longer": make.torch.zeros(1, 1, dtype=make.torch.bool)}


def image_positions(make: Maker, inputs: Inputs) -> Inputs:
    """Where the image's latent queries go in the text (Kosmos-2): the ids lengthened to
    hold them after a first token, the mask marking them."""
    queries = as_int(find(make.config, "latent_query_num"), 0)
    if not queries:
        return {}
    ids = make.ids(queries + 2)
    mask = make.torch.zeros_like(ids)
    mask[:, 1 : queries + 1] = 1
    return {"input_ids": ids, "image_embeds_position_mask": mask}


def frames(make: Maker, features: Any) -> int:
    """The frames of (batch, frames, width) or (batch, width, frames) features: the axis
    that is not one of the config's feature widths."""
    if int(features.shape[-1]) in make.feature_widths():
        return int(features.shape[1])
    return int(features.shape[-1])


def features_mask(make: Maker, inputs: Inputs) -> Inputs:
    """Every frame of the features valid."""
    features = inputs.get("input_features")
    if features is None or features.dim() != 3:
        return {}
    mask = make.torch.ones(1, frames(make, features), dtype=make.torch.long)
    return {"input_features_mask": mask}


def chunk_lengths(make: Maker, inputs: Inputs) -> Inputs:
    """Each chunk of features' length in waveform samples: its frames times the hop."""
    features = inputs.get("input_features")
    if features is None or features.dim() != 3:
        return {}
    samples = frames(make, features) * as_int(find(make.config, "hop_length"), 160)
    return {"chunk_sample_lengths": make.torch.full((int(features.shape[0]),), samples)}


def mel_mask(make: Maker, inputs: Inputs) -> Inputs:
    """No frame of the mel features padded (Gemma 3n's mask flags padding)."""
    mel = inputs.get("audio_mel")
    if mel is None or mel.dim() != 3:
        return {}
    return {"audio_mel_mask": make.torch.zeros(1, frames(make, mel), dtype=make.torch.bool)}


def masked_patches(make: Maker, inputs: Inputs) -> Inputs:
    """Half the patches masked (a masked-autoencoder's pretraining head): one flag a patch
    of the pixels, or of a video's tubes."""
    pixels = inputs.get("pixel_values")
    if pixels is None or pixels.dim() not in (4, 5):
        return {}
    patch = as_int(find(make.config, "patch_size"), 16)
    count = (int(pixels.shape[-2]) // patch) * (int(pixels.shape[-1]) // patch)
    if pixels.dim() == 5:
        count *= int(pixels.shape[1]) // as_int(find(make.config, "tubelet_size"), 1)
    masked = make.torch.zeros(1, count, dtype=make.torch.bool)
    masked[:, : count // 2] = True
    return {"bool_masked_pos": masked}


def aspect_ratio_ids(make: Maker, inputs: Inputs) -> Inputs:
    """Every image one tile wide, as many high as the pixels hold (Mllama)."""
    return {"aspect_ratio_ids": make.torch.ones(1, 1, dtype=make.torch.long)}


def aspect_ratio_mask(make: Maker, inputs: Inputs) -> Inputs:
    """Every tile of a (batch, images, tiles, ...) pixel input present."""
    pixels = inputs.get("pixel_values")
    tiles = int(pixels.shape[2]) if pixels is not None and pixels.dim() == 6 else 1
    return {"aspect_ratio_mask": make.torch.ones(1, 1, tiles, dtype=make.torch.long)}


def image_attention(make: Maker, inputs: Inputs) -> Inputs:
    """Every token attending to every image of a (batch, images, ...) pixel input."""
    pixels = inputs.get("pixel_values")
    if pixels is None or pixels.dim() != 5:
        return {}
    shape = (1, _ids_length(inputs), int(pixels.shape[1]))
    return {"image_attention_mask": make.torch.ones(*shape, dtype=make.torch.long)}


def waveform(make: Maker, inputs: Inputs) -> Inputs:
    """Audio beside another main input: (batch, channels, samples), one channel."""
    return {"input_values": make.floats(1, 1, SAMPLES)}


def video(make: Maker, inputs: Inputs) -> Inputs:
    """A video beside another main input: (batch, frames, channels, height, width)."""
    return {"pixel_values_videos": make.video()}


def flattened_patches(make: Maker, inputs: Inputs) -> Inputs:
    """Pix2Struct's patches: each row's and column's index, then its flattened pixels."""
    width = as_int(find(make.config, "patch_embed_hidden_size"), make.hidden)
    patches = make.floats(1, SEQUENCE, 2 + width)
    patches[:, :, :2] = make.torch.randint(1, 4, (1, SEQUENCE, 2), generator=make.generator)
    return {"flattened_patches": patches}


def codes(make: Maker, inputs: Inputs) -> Inputs:
    """Audio codec codes: (batch, quantizers, frames), each below the codebook size."""
    config = make.config
    quantizers = as_int(find(config, "num_quantizers") or find(config, "num_codebooks"), 1)
    size = max(2, min(as_int(find(config, "codebook_size"), make.vocab), 100))
    codes = make.torch.randint(0, size, (1, quantizers, SEQUENCE), generator=make.generator)
    return {"codes": codes}


def decoder_values(make: Maker, inputs: Inputs) -> Inputs:
    """A speech decoder's input: mel frames (SpeechT5), or hidden states where the
    encoder's input is hidden states (a model without pre-nets, which leaves both to
    its caller)."""
    encoder = inputs.get("input_values")
    if encoder is not None and encoder.dim() == 3 and int(encoder.shape[-1]) == make.hidden:
        return {"decoder_input_values": make.floats(1, 4, make.hidden)}
    bins = as_int(find(make.config, "num_mel_bins"), 80)
    return {"decoder_input_values": make.floats(1, 4, bins)}


def merge_sizes(make: Maker, inputs: Inputs) -> Inputs:
    """Each image's spatial merge size (VideoLLaMA 3), one image."""
    merge = as_int(find(make.config, "spatial_merge_size"), 2)
    return {"merge_sizes": make.torch.tensor([merge])}


def prompt_pixels(make: Maker, inputs: Inputs) -> Inputs:
    """A prompt image the size of the pixels (SegGPT's in-context example)."""
    pixels = inputs.get("pixel_values")
    shape = tuple(pixels.shape) if pixels is not None else (1, make.channels, *make.image)
    return {"prompt_pixel_values": make.floats(*shape)}


def prompt_masks(make: Maker, inputs: Inputs) -> Inputs:
    """The prompt image's mask, an image of its size."""
    pixels = inputs.get("prompt_pixel_values", inputs.get("pixel_values"))
    shape = tuple(pixels.shape) if pixels is not None else (1, make.channels, *make.image)
    return {"prompt_masks": make.floats(*shape)}


def camera_mask(make: Maker, inputs: Inputs) -> Inputs:
    """Every image of a (batch, images, ...) pixel input present (PI0's cameras)."""
    pixels = inputs.get("pixel_values")
    if pixels is None or pixels.dim() != 5:
        return {}
    return {"pixel_attention_mask": make.torch.ones(1, int(pixels.shape[1]), dtype=bool)}
