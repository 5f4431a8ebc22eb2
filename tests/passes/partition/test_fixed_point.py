"""The partitioner's fixed point (`_matching.matched_to_fixed_point`) on its own: what each
round is built with, when it stops, and the two rules that compute the next round's
decisions from a round's values (`unfolded_constant_gemms`, `copied_sources_gemms`)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold.passes._ops import EDGE_GEMM_ARGS
from xnnfold.passes.analysis import new_analysis_cache, RoundDecisions
from xnnfold.passes.partition import _matching
from xnnfold.passes.partition._findings import Findings, NO_FINDINGS
from xnnfold.passes.partition._matching import Matching, unfolded_constant_gemms


class _Rounds:
    """Stands in for `match_once` and the two rules: each round returns what the script
    says the rules find, and records the decisions the round's configs were built with."""

    def __init__(self, non_folding: list[set[str]], fold_anyway: list[set[str]]) -> None:
        self.non_folding, self.fold_anyway = non_folding, fold_anyway
        self.built_with: list[RoundDecisions] = []

    def configs_for(self, decisions: RoundDecisions) -> dict[str, Any]:
        self.built_with.append(decisions)
        return {"round": len(self.built_with)}

    def unfolded(self, ep: Any, matching: Matching, *, cache: Any) -> frozenset[str]:
        return frozenset(self.non_folding[min(len(self.built_with), len(self.non_folding)) - 1])

    def copied(self, ep: Any, matching: Matching) -> frozenset[str]:
        return frozenset(self.fold_anyway[min(len(self.built_with), len(self.fold_anyway)) - 1])


def _run(rounds: _Rounds) -> Matching:
    with (
        mock.patch.object(
            _matching, "match_once", lambda configs, ep: Matching([[configs["round"]]], NO_FINDINGS)
        ),
        mock.patch.object(_matching, "unfolded_constant_gemms", rounds.unfolded),
        mock.patch.object(_matching, "copied_sources_gemms", rounds.copied),
    ):
        return _matching.matched_to_fixed_point(
            object(),  # type: ignore[arg-type]
            rounds.configs_for,
            cache=new_analysis_cache(),
        )


def test_without_new_decisions_it_is_one_round() -> None:
    rounds = _Rounds([set()], [set()])
    matching = _run(rounds)
    assert rounds.built_with == [RoundDecisions()]
    assert matching.groups == [[1]]


def test_each_round_is_built_with_the_decisions_so_far_until_they_stop_changing() -> None:
    rounds = _Rounds([{"mm"}, {"mm", "addmm"}, {"mm", "addmm"}], [set(), {"conv"}, {"conv"}])
    matching = _run(rounds)
    assert rounds.built_with == [
        RoundDecisions(),
        RoundDecisions(non_folding=frozenset({"mm"})),
        RoundDecisions(non_folding=frozenset({"mm", "addmm"}), fold_anyway=frozenset({"conv"})),
    ]
    # The last round's matching is the answer.
    assert matching.groups == [[3]]


def test_decisions_only_grow() -> None:
    """A rule that stops finding a GEMM does not take it back: the sets only grow, which
    is what makes the loop end."""
    rounds = _Rounds([{"mm"}, set()], [set()])
    _run(rounds)
    assert rounds.built_with[-1].non_folding == {"mm"}
    assert len(rounds.built_with) == 2


# --------------------------------------------------------------------------------------
# The rules, on a real graph and hand-made round values.


class _TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w * 2.0) + F.linear(x, self.w * 3.0)


def _edge_program() -> tuple[ExportedProgram, list[Node]]:
    from executorch.exir import to_edge

    ep = to_edge(torch.export.export(_TwoLinears().eval(), (torch.randn(3, 4),))).exported_program()
    gemms = [n for n in ep.graph.nodes if n.op == "call_function" and n.target in EDGE_GEMM_ARGS]
    assert len(gemms) == 2, [str(n.target) for n in ep.graph.nodes]
    return ep, gemms


def _computed(gemm: Node) -> list[int]:
    """The positions of ``gemm``'s weight and bias computed by a node (not stored)."""
    return [
        index
        for index in EDGE_GEMM_ARGS[gemm.target]
        if index < len(gemm.args)
        and isinstance(arg := gemm.args[index], Node)
        and arg.op != "placeholder"
    ]


@pytest.mark.parametrize("folded", [(), (0,), (0, 1)])
def test_a_matched_gemm_that_folds_no_computed_argument_is_non_folding(
    folded: tuple[int, ...],
) -> None:
    ep, gemms = _edge_program()
    folds = {gemms[i].name: MappingProxyType(dict.fromkeys(_computed(gemms[i]))) for i in folded}
    matching = Matching([list(gemms)], Findings(folds=MappingProxyType(folds)))
    expected = {g.name for i, g in enumerate(gemms) if i not in folded}
    assert unfolded_constant_gemms(ep, matching, cache=new_analysis_cache()) == expected


def test_a_gemm_outside_every_group_with_a_computed_argument_is_non_folding() -> None:
    ep, gemms = _edge_program()
    matching = Matching([], NO_FINDINGS)
    assert unfolded_constant_gemms(ep, matching, cache=new_analysis_cache()) == {
        g.name for g in gemms
    }
