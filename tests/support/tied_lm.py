"""A tiny transformers causal LM whose lm_head is its embedding (random weights, nothing
downloaded), shared by the tied-table tests."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TIED_VOCAB", "TIED_HIDDEN", "tiny_tied_llama"]

TIED_VOCAB, TIED_HIDDEN = 1000, 64


def tiny_tied_llama(seed: int) -> Any:
    """``LlamaForCausalLM`` with one layer and tied embeddings, in eval mode."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=TIED_VOCAB,
        hidden_size=TIED_HIDDEN,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    lm = transformers.LlamaForCausalLM(config).eval()
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    return lm
