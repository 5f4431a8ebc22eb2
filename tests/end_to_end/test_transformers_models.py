"""Model classes nobody here wrote: transformers' audio encoders, vocoders and the causal
LMs whose GEMM weights are computed (found by benchmarks/sweeps/transformers).

The fixtures (`xnnfold.fixtures`) reproduce the patterns of these architectures; these
tests lower the library's own classes, at tiny configs with random weights (nothing is
downloaded), so a pattern the fixtures miss shows here. Each model: every GEMM delegated,
the expected number folded, and the `.pte` run through executorch.runtime equal to eager.
Needs the `models` extra (transformers, pinned); CI installs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch

from xnnfold.testing import assert_fully_delegated

from tests.support.audio_encoders import tiny_encoder

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.runtime]


def _audio(samples: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, samples, generator=torch.Generator().manual_seed(1)),)


# Two conv layers of the feature encoder, two transformer layers: the positional
# convolution (weight_norm, dim=2) is what folds.
_ENCODER = tiny_encoder(layers=2)
_HIFIGAN = dict(
    model_in_dim=20,
    upsample_initial_channel=32,
    upsample_rates=[4, 4],
    upsample_kernel_sizes=[8, 8],
    resblock_kernel_sizes=[3, 5],
    resblock_dilation_sizes=[[1, 3], [1, 3]],
)


# A causal LM at this size: a small vocabulary (its special tokens inside it), two layers.
_LM = dict(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=2,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    use_cache=False,
)


class _LogitsOf(torch.nn.Module):
    """A causal LM called on token ids, returning its logits."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids).logits


def _ids() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1)),)


def _with_weight_norm(model: Any) -> Any:
    # As for training, or for a checkpoint kept parametrized.
    model.apply_weight_norm()
    return model


@dataclass(frozen=True)
class Case:
    build: Callable[[], Any]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    folded: int  # GEMMs whose weight is computed, all of which must fold


CASES = {
    "wav2vec2": Case(
        lambda: transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(**_ENCODER)),
        lambda: _audio(800),
        1,
    ),
    "hubert": Case(
        lambda: transformers.HubertModel(transformers.HubertConfig(**_ENCODER)),
        lambda: _audio(800),
        1,
    ),
    "wavlm": Case(
        lambda: transformers.WavLMModel(transformers.WavLMConfig(**_ENCODER)),
        lambda: _audio(800),
        7,
    ),
    "sew": Case(
        lambda: transformers.SEWModel(transformers.SEWConfig(**_ENCODER, squeeze_factor=2)),
        lambda: _audio(800),
        1,
    ),
    "unispeech": Case(
        lambda: transformers.UniSpeechModel(transformers.UniSpeechConfig(**_ENCODER)),
        lambda: _audio(800),
        1,
    ),
    "dac": Case(
        lambda: _with_weight_norm(
            transformers.DacModel(
                transformers.DacConfig(
                    encoder_hidden_size=8,
                    downsampling_ratios=[2, 4],
                    decoder_hidden_size=32,
                    upsampling_ratios=[4, 2],
                    n_codebooks=2,
                    codebook_size=32,
                    codebook_dim=4,
                    hidden_size=16,
                    hop_length=8,
                )
            )
        ),
        lambda: (torch.randn(1, 1, 400, generator=torch.Generator().manual_seed(1)),),
        -1,  # counted below: every weight_norm convolution
    ),
    # Its location-variable convolution is an einsum over six indices: 7-D permutes that
    # XNNPACK cannot load stay on portable (`within_xnnpack_rank`), the convolutions fold.
    "univnet": Case(
        lambda: _with_weight_norm(
            transformers.UnivNetModel(
                transformers.UnivNetConfig(
                    model_in_channels=8,
                    model_hidden_channels=8,
                    num_mel_bins=10,
                    resblock_kernel_sizes=[3],
                    resblock_stride_sizes=[4],
                    resblock_dilation_sizes=[[1, 3]],
                    kernel_predictor_num_blocks=1,
                    kernel_predictor_hidden_channels=8,
                )
            )
        ),
        lambda: (
            torch.randn(1, 5, 10, generator=torch.Generator().manual_seed(1)),
            torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(2)),
        ),
        -1,
    ),
    "speecht5_hifigan": Case(
        lambda: _with_weight_norm(
            transformers.SpeechT5HifiGan(transformers.SpeechT5HifiGanConfig(**_HIFIGAN))
        ),
        lambda: (torch.randn(12, 20, generator=torch.Generator().manual_seed(1)),),
        20,
    ),
    "fastspeech2_hifigan": Case(
        lambda: _with_weight_norm(
            transformers.FastSpeech2ConformerHifiGan(
                transformers.FastSpeech2ConformerHifiGanConfig(**_HIFIGAN)
            )
        ),
        lambda: (torch.randn(1, 12, 20, generator=torch.Generator().manual_seed(1)),),
        20,
    ),
    # The mixer's causal convolution takes `conv1d.weight.squeeze(1)` (folded); its
    # `dt_proj.weight @ x` mm is delegated with that operand taken at run time, since
    # folding it would store the table twice.
    "mamba": Case(
        lambda: _LogitsOf(
            transformers.MambaForCausalLM(
                transformers.MambaConfig(
                    **_LM, state_size=4, intermediate_size=32, conv_kernel=4, time_step_rank=2
                )
            )
        ),
        _ids,
        2,
    ),
    # Every linear is `x @ self.weight.T`: the transposed weight folds.
    "falcon": Case(
        lambda: _LogitsOf(
            transformers.FalconForCausalLM(transformers.FalconConfig(**_LM, num_attention_heads=2))
        ),
        _ids,
        8,
    ),
    # The short causal convolution takes `conv.weight.squeeze(1)`, as Mamba's does.
    "lfm3": Case(
        lambda: _LogitsOf(
            transformers.Lfm3ForCausalLM(
                transformers.Lfm3Config(
                    **_LM, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32
                )
            )
        ),
        _ids,
        2,
    ),
}


def _computed_weights(model: Any) -> int:
    from xnnfold import find_sites

    return len(find_sites(model))


@pytest.mark.parametrize("name", CASES)
def test_lowers_fully_delegated_and_matches_eager(name: str) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build().eval()
    folded = case.folded if case.folded >= 0 else _computed_weights(model)
    assert folded > 0
    check = assert_fully_delegated(model, case.inputs())
    assert len(check.report.folded) == folded, check.report.table()
