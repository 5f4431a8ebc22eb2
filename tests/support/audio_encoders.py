"""A tiny configuration of transformers' wav2vec2-family audio encoders, shared by the
tests that lower transformers' own model classes (random weights, seconds to lower)."""

from __future__ import annotations

from typing import Any


def tiny_encoder(*, layers: int) -> dict[str, Any]:
    """Keyword arguments of a wav2vec2-family config: two feature-encoder convs and
    ``layers`` transformer layers; the positional convolution (weight_norm, dim=2) is
    what folds."""
    return dict(
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=37,
        conv_dim=(16, 16),
        conv_kernel=(10, 3),
        conv_stride=(5, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
    )
