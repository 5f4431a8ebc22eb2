"""Which constants are tied tables, on partitioned programs (no lowering, no runtime).

`find_tied_tables` reads the program the partitioner tagged; `table_uses` reads the
exported programs of several methods (the partitioner through `CrossMethodFacts`). The end-to-end
checks (bytes written, outputs through executorch.runtime) are in
tests/end_to_end/test_tied_tables.py.
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
from xnnfold.passes.analysis import find_tied_tables, table_uses, TableUses, TiedTables
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


def _tags(programs: Any, **options: Any) -> dict[str, list[str]]:
    """The placeholders tagged for an external file after lowering, by method."""
    edge = to_edge_transform_and_lower(
        programs, partitioner=[xnnfold.XnnpackFoldingPartitioner(**options)]
    )
    return {
        method: [
            n.name
            for n in edge.exported_program(method).graph.nodes
            if n.op == "placeholder" and external_tag(n) is not None
        ]
        for method in edge.methods
    }


def test_by_default_the_partitioner_tags_nothing() -> None:
    assert _tags(torch.export.export(Tied().eval(), INPUTS)) == {"forward": []}


@pytest.mark.slow
def test_the_partitioner_tags_both_copies_for_one_file() -> None:
    edge = to_edge_transform_and_lower(
        torch.export.export(Tied().eval(), INPUTS),
        partitioner=[xnnfold.XnnpackFoldingPartitioner(tie_tables=True)],
    ).exported_program()
    tags = {n.name: external_tag(n) for n in edge.graph.nodes if n.op == "placeholder"}
    assert [name for name, tag in tags.items() if tag is not None] == ["p_emb_weight"]
    (table,) = [n for n in edge.graph.nodes if n.name == "p_emb_weight"]
    assert table.meta["constant_tag"] == EXTERNAL_CONSTANT_TAG
    assert table.meta["custom"]["delegate_constant_tag"] == EXTERNAL_CONSTANT_TAG


def _two_methods(emb: nn.Module, logits: type[nn.Module] = Logits) -> dict[str, Any]:
    ids, x = INPUTS
    return {
        "embed": torch.export.export(Embed(emb).eval(), (ids,)),
        "logits": torch.export.export(logits(emb).eval(), (x,)),
    }


class LogitsAndScaled(Logits):
    """Reads the table as a linear's weight and computes another weight from it."""

    def forward(self, x: torch.Tensor) -> Any:  # type: ignore[override]
        return F.linear(x, self.emb.weight), F.linear(x, self.emb.weight * 2.0)


def test_table_uses_tell_a_linear_s_weight_from_a_lookup() -> None:
    programs = _two_methods(nn.Embedding(32, 8))
    assert table_uses(programs["embed"]) == TableUses(looked_up=frozenset({"emb.weight"}))
    assert table_uses(programs["logits"]) == TableUses(as_linear_weight=frozenset({"emb.weight"}))


def test_a_weight_computed_from_the_table_is_no_linear_s_own_weight() -> None:
    programs = _two_methods(nn.Embedding(32, 8), LogitsAndScaled)
    assert table_uses(programs["logits"]) == TableUses()


def test_tying_on_the_partitioner_tags_a_table_shared_across_methods() -> None:
    """One mechanism: the partitioners find the table from the facts they share, with no
    call before lowering."""
    tags = _tags(_two_methods(nn.Embedding(32, 8)), tie_tables=True)
    assert tags == {"embed": ["p_emb_weight"], "logits": []}  # the delegate holds logits'


@pytest.mark.slow
def test_tying_across_methods_needs_the_same_tensor_in_both() -> None:
    ids, x = INPUTS
    programs = {
        "embed": torch.export.export(Embed(nn.Embedding(32, 8)).eval(), (ids,)),
        "logits": torch.export.export(Logits(nn.Embedding(32, 8)).eval(), (x,)),
    }
    assert _tags(programs, tie_tables=True) == {"embed": [], "logits": []}


@pytest.mark.slow
def test_a_method_computing_a_weight_from_the_table_leaves_it_untied() -> None:
    """Its delegate reads the table at run time, not as the stored weight: tagging the
    lookup's copy would only add a data file."""
    tags = _tags(_two_methods(nn.Embedding(32, 8), LogitsAndScaled), tie_tables=True)
    assert tags == {"embed": [], "logits": []}


def test_storing_a_table_in_a_data_file_is_said_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The `.pte` alone no longer loads: the partitioner says which file it needs."""
    ep = torch.export.export(Tied().eval(), INPUTS)
    with caplog.at_level(logging.WARNING, logger="xnnfold"):
        to_edge_transform_and_lower(
            ep, partitioner=[xnnfold.XnnpackFoldingPartitioner(tie_tables=True)]
        )
    (message,) = [r.getMessage() for r in caplog.records if "tied table" in r.getMessage()]
    assert "emb.weight" in message and f"{EXTERNAL_CONSTANT_TAG}.ptd" in message
    assert "xnnfold.save" in message and "tie_tables=False" in message
