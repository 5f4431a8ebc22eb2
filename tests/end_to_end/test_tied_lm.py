"""A transformers causal LM with tied input and output embeddings, its table stored once.

A tiny ``LlamaForCausalLM`` (random weights, nothing downloaded) whose lm_head is its
embedding, exported with a dynamic sequence length: xnnfold's `.pte` + `.ptd` run through
executorch.runtime equal to eager, in at most the stock program's bytes minus 90% of the
table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold

from tests.support.tied_lm import TIED_HIDDEN, TIED_VOCAB, tiny_tied_llama

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.runtime]

VOCAB, HIDDEN = TIED_VOCAB, TIED_HIDDEN


class Logits(nn.Module):
    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def _tied_llama() -> nn.Module:
    return Logits(tiny_tied_llama(0)).eval()


def test_tied_llama_stores_its_embedding_once(tmp_path: Path) -> None:
    model = _tied_llama()
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    dynamic = ({1: torch.export.Dim("seq", min=2, max=64)},)
    stock_et = to_edge_transform_and_lower(
        torch.export.export(model, (ids,), dynamic_shapes=dynamic),
        partitioner=[XnnpackPartitioner()],
    ).to_executorch()
    (tmp_path / "stock").mkdir()
    stock = sum(p.stat().st_size for p in xnnfold.save(stock_et, tmp_path / "stock" / "lm.pte"))

    et = xnnfold.to_executorch(model, (ids,), dynamic_shapes=dynamic)
    paths = xnnfold.save(et, tmp_path / "lm.pte")
    table = VOCAB * HIDDEN * 4
    assert sum(p.stat().st_size for p in paths) <= stock - 0.9 * table
    assert xnnfold.explain(et).bytes_saved == table

    program = xnnfold.LoadedProgram(paths[0].read_bytes(), data_path=paths[1])
    for length in (2, 12, 64):
        seq = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
        (logits,) = program([seq])
        torch.testing.assert_close(logits, model(seq), rtol=1e-4, atol=1e-4)
