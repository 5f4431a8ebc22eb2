"""Inputs of the few transformers classes whose ``forward`` takes tensors no name or
config field describes: each a row of `SPECIAL`, keyed by class name, built from the
config's sizes. The transformers sweep tries them first.

A flow-matching DiT vocoder's step (Qwen2.5-Omni's Token2Wav: the noisy mel frames, the
reference mel, the speaker's embedding repeated over the frames, the codes, the flow
time) and the model that samples it (codes, the speaker's embedding, the reference mel);
a Perceiver estimating optical flow from a frame pair cut in 3x3 patches at its
training size; a text line as tall as a recognizer's default backbone needs.
"""

from __future__ import annotations

from typing import Any, Callable

from benchmarks.sweeps.transformers.input_tensors import as_int, find, Maker, SEQUENCE

# Frames of a reference mel spectrogram.
_REFERENCE_FRAMES = 16


def _codes(make: Maker) -> Any:
    """Codec codes below the DiT's code vocabulary, (batch, codes)."""
    vocab = max(2, min(as_int(find(make.config, "num_embeds"), make.vocab), 100))
    return make.torch.randint(0, vocab, (1, SEQUENCE), generator=make.generator)


def _token2wav_step(make: Maker) -> dict[str, Any]:
    config = make.config
    mel = as_int(find(config, "mel_dim"), 80)
    frames = SEQUENCE * as_int(find(config, "repeats"), 1)
    speaker = as_int(find(config, "enc_emb_dim"), make.hidden)
    return {
        "hidden_states": make.floats(1, frames, mel),
        "condition_vector": make.floats(1, _REFERENCE_FRAMES, mel),
        "speaker_embedding": make.floats(1, frames, speaker),
        "quantized_code": _codes(make),
        "time_step": make.torch.full((1,), 0.5),
    }


def _token2wav(make: Maker) -> dict[str, Any]:
    dit = getattr(make.config, "dit_config", make.config)
    inner = Maker(dit)
    return {
        "code": _codes(inner),
        "conditioning": inner.floats(1, as_int(find(dit, "enc_emb_dim"), inner.hidden)),
        "reference_mel": inner.floats(1, _REFERENCE_FRAMES, as_int(find(dit, "mel_dim"), 80)),
    }


def _optical_flow(make: Maker) -> dict[str, Any]:
    """Two frames at the training size, each pixel's 3x3 patch of channels stacked."""
    height, width = (as_int(side, 64) for side in find(make.config, "train_size") or (64, 64))
    return {"inputs": make.floats(1, 2, 27, height, width)}


def _text_line(make: Maker) -> dict[str, Any]:
    """A text line whose last feature map is three rows high, which the recognition head
    pools to the one row it reads: its default backbone (PP-LCNetV3, strided as for
    detection) downsamples by 32."""
    return {"pixel_values": make.floats(1, make.channels, 3 * 32, 64)}


SPECIAL: dict[str, Callable[[Maker], dict[str, Any]]] = {
    "PPOCRV5MobileRecForTextRecognition": _text_line,
    "Qwen2_5OmniToken2WavDiTModel": _token2wav_step,
    "Qwen2_5OmniToken2WavModel": _token2wav,
    "PerceiverForOpticalFlow": _optical_flow,
}
