"""A transformers causal LM with tied input and output embeddings.

A tiny ``LlamaForCausalLM`` (random weights, nothing downloaded) whose lm_head is its
embedding, exported with a dynamic sequence length. With the folding partitioner swapped
in for the stock one and the `.pte` written alone (``et.write_to_file``), the program is
byte for byte stock's and loads alone; with ``tie_tables=True``, its `.pte` + `.ptd` take
at most the stock program's bytes minus 90% of the table. Both run through
executorch.runtime equal to eager.
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


def _export(model: nn.Module) -> tuple[torch.export.ExportedProgram, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    dynamic = ({1: torch.export.Dim("seq", min=2, max=64)},)
    return torch.export.export(model, (ids,), dynamic_shapes=dynamic), ids


def _assert_runs_like_eager(program: xnnfold.LoadedProgram, model: nn.Module) -> None:
    for length in (2, 12, 64):
        seq = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
        (logits,) = program([seq])
        torch.testing.assert_close(logits, model(seq), rtol=1e-4, atol=1e-4)


def test_swapped_in_the_tied_llama_s_pte_is_stock_s_and_loads_alone(tmp_path: Path) -> None:
    model = _tied_llama()
    ep, _ = _export(model)
    stock = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    et = to_edge_transform_and_lower(
        ep, partitioner=[xnnfold.XnnpackFoldingPartitioner()]
    ).to_executorch()
    pte = tmp_path / "lm.pte"
    with open(pte, "wb") as file:
        et.write_to_file(file)
    assert pte.read_bytes() == stock.buffer
    report = xnnfold.explain(et)
    assert report.bytes_tying_would_save == VOCAB * HIDDEN * 4
    _assert_runs_like_eager(xnnfold.LoadedProgram(pte.read_bytes()), model)


def test_tied_llama_stores_its_embedding_once_with_tying_on(tmp_path: Path) -> None:
    model = _tied_llama()
    ep, ids = _export(model)
    stock_et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    (tmp_path / "stock").mkdir()
    stock = sum(p.stat().st_size for p in xnnfold.save(stock_et, tmp_path / "stock" / "lm.pte"))

    et = xnnfold.to_executorch(
        model,
        (ids,),
        dynamic_shapes=({1: torch.export.Dim("seq", min=2, max=64)},),
        tie_tables=True,
    )
    paths = xnnfold.save(et, tmp_path / "lm.pte")
    assert [p.name for p in paths] == ["lm.pte", "lm.ptd"]
    table = VOCAB * HIDDEN * 4
    assert sum(p.stat().st_size for p in paths) <= stock - 0.9 * table
    assert xnnfold.explain(et).bytes_saved == table
    _assert_runs_like_eager(xnnfold.LoadedProgram(paths[0].read_bytes(), data_path=paths[1]), model)
