"""What the tied-table tests share: a tiny transformers causal LM whose lm_head is its
embedding (random weights, nothing downloaded), and a table looked up by one method and
multiplied by in another."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Embed", "Logits", "TIED_HIDDEN", "TIED_VOCAB", "tiny_tied_llama"]

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


class Embed(torch.nn.Module):
    """One method of a two-method tied program: the lookup ``emb(ids)``."""

    def __init__(self, emb: torch.nn.Embedding) -> None:
        super().__init__()
        self.emb = emb

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids)


class Logits(Embed):
    """The other method: ``F.linear(x, emb.weight)`` with the same table."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.nn.functional.linear(x, self.emb.weight)
