"""Which constants are tied tables, on partitioned programs (no lowering, no runtime).

`find_tied_tables` reads the program the partitioner tagged; `tie_tables` reads the
exported programs of several methods. The end-to-end checks (bytes written, outputs
through executorch.runtime) are in tests/end_to_end/test_tied_tables.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold
from xnnfold._meta import EXTERNAL_CONSTANT_TAG
from xnnfold.passes.analysis import find_tied_tables, TiedTables
from xnnfold.passes.analysis._nodes import external_tag

from tests.support.tied_lm import Embed, Logits


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 8)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> Any:
        return self.emb(ids), F.linear(x, self.emb.weight)


class LinearOnly(Tied):
    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> Any:
        return F.linear(x, self.emb.weight) + ids.sum()


class AlsoMultiplied(Tied):
    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> Any:
        return self.emb(ids), F.linear(x, self.emb.weight), x.sum() * self.emb.weight


INPUTS = (torch.randint(0, 32, (4,)), torch.randn(2, 8))


class _Recording(xnnfold.XnnpackFoldingPartitioner):
    """Records what `find_tied_tables` finds on the program it partitioned (linear is
    kept undecomposed only on `to_edge_transform_and_lower`'s path)."""

    found: TiedTables

    def partition(self, exported_program: Any) -> Any:
        result = super().partition(exported_program)
        self.found = find_tied_tables(result.tagged_exported_program)
        return result


def _found(model: nn.Module, **tag: str) -> TiedTables:
    """The tied tables of ``model``'s partitioned program; ``tag`` sets a placeholder's
    external tag (its name -> the meta key) before lowering."""
    ep = torch.export.export(model.eval(), INPUTS)
    for node in ep.graph.nodes:
        if node.name in tag:
            node.meta[tag[node.name]] = EXTERNAL_CONSTANT_TAG
    partitioner = _Recording(tie_tables=False)
    to_edge_transform_and_lower(ep, partitioner=[partitioner])
    return partitioner.found


def _names(tables: TiedTables) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    return (
        [(t.fqn, t.nbytes) for t in tables.tied],
        [(t.fqn, t.code.code) for t in tables.untied],
    )


def test_an_embedding_shared_with_a_delegated_linear_is_tied() -> None:
    assert _names(_found(Tied())) == ([("emb.weight", 32 * 8 * 4)], [])


@pytest.mark.slow
def test_a_weight_only_the_delegate_reads_is_not_a_tied_table() -> None:
    assert _names(_found(LinearOnly())) == ([], [])


def test_a_table_the_delegate_also_multiplies_by_is_untied_with_xnf517() -> None:
    tables = _found(AlsoMultiplied())
    assert _names(tables) == ([], [("emb.weight", "XNF517")])


@pytest.mark.slow
def test_a_table_the_user_tagged_external_is_left_alone() -> None:
    assert _names(_found(Tied(), p_emb_weight="constant_tag")) == ([], [])


@pytest.mark.slow
def test_the_partitioner_tags_both_copies_for_one_file() -> None:
    edge = to_edge_transform_and_lower(
        torch.export.export(Tied().eval(), INPUTS),
        partitioner=[xnnfold.XnnpackFoldingPartitioner()],
    ).exported_program()
    tags = {n.name: external_tag(n) for n in edge.graph.nodes if n.op == "placeholder"}
    assert [name for name, tag in tags.items() if tag is not None] == ["p_emb_weight"]
    (table,) = [n for n in edge.graph.nodes if n.name == "p_emb_weight"]
    assert table.meta["constant_tag"] == EXTERNAL_CONSTANT_TAG
    assert table.meta["custom"]["delegate_constant_tag"] == EXTERNAL_CONSTANT_TAG


def test_tie_tables_tags_a_table_shared_across_methods() -> None:
    emb = nn.Embedding(32, 8)
    ids, x = INPUTS
    programs = {
        "embed": torch.export.export(Embed(emb).eval(), (ids,)),
        "logits": torch.export.export(Logits(emb).eval(), (x,)),
    }
    assert xnnfold.tie_tables(programs) == {
        "embed": ("p_emb_weight",),
        "logits": ("p_emb_weight",),
    }
    for ep in programs.values():
        (table,) = [n for n in ep.graph.nodes if n.name == "p_emb_weight"]
        assert external_tag(table) == EXTERNAL_CONSTANT_TAG


def test_tie_tables_needs_the_same_tensor_in_both_methods() -> None:
    ids, x = INPUTS
    programs = {
        "embed": torch.export.export(Embed(nn.Embedding(32, 8)).eval(), (ids,)),
        "logits": torch.export.export(Logits(nn.Embedding(32, 8)).eval(), (x,)),
    }
    assert xnnfold.tie_tables(programs) == {}
    assert all(external_tag(n) is None for ep in programs.values() for n in ep.graph.nodes)


def test_storing_a_table_in_a_data_file_is_said_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The `.pte` alone no longer loads: the partitioner says which file it needs."""
    ep = torch.export.export(Tied().eval(), INPUTS)
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        to_edge_transform_and_lower(ep, partitioner=[xnnfold.XnnpackFoldingPartitioner()])
    (message,) = [r.getMessage() for r in caplog.records if "tied table" in r.getMessage()]
    assert "emb.weight" in message and f"{EXTERNAL_CONSTANT_TAG}.ptd" in message
    assert "tie_tables=False" in message
