"""`FoldMark` and `GemmReason` (`xnnfold/passes/_marks.py`): frozen, and refused when
malformed, so a mark that reaches preprocess is one the fold pass can act on."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from xnnfold._meta import FOLD_META_KEY, REASON_META_KEY
from xnnfold.passes import FoldOptions
from xnnfold.passes._marks import fold_mark_of, FoldMark, GemmReason, reason_of


def test_a_mark_is_frozen_and_survives_the_deep_copy_preprocess_gets() -> None:
    mark = FoldMark(FoldOptions(), ((1, "conv.weight"),), ((0, 0.5),), ((1, 64, "g0"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        mark.arguments = ()  # type: ignore[misc]
    assert copy.deepcopy(mark) == mark
    assert mark.folded == (1,)


@pytest.mark.parametrize(
    "arguments,scales,growth,error",
    [
        ((), (), (), ValueError),  # asks for nothing
        (((1, None), (1, None)), (), (), ValueError),  # an argument twice
        (((1, None),), (), ((2, 8, "g"),), ValueError),  # growth of an unfolded argument
        (({1: None},), (), (), TypeError),
        (((-1, None),), (), (), TypeError),
        (((True, None),), (), (), TypeError),
        (((1, 7),), (), (), TypeError),  # a site that is not a name
        ((), ((0, "half"),), (), TypeError),
        (((1, None),), (), ((1, -8, "g"),), TypeError),
        ([(1, None)], (), (), TypeError),  # a list: not frozen
    ],
)
def test_a_malformed_mark_is_refused(
    arguments: object, scales: object, growth: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        FoldMark(FoldOptions(), arguments, scales, growth)  # type: ignore[arg-type]


def test_a_mark_without_its_options_is_refused() -> None:
    with pytest.raises(TypeError, match="FoldOptions"):
        FoldMark({"max_fold_nodes": 1}, ((1, None),))  # type: ignore[arg-type]


def test_a_reason_is_refused_without_a_text_or_with_a_malformed_growth() -> None:
    with pytest.raises(TypeError):
        GemmReason(None, "XNF501")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        GemmReason("declined", "XNF516", ((1, 8),))  # type: ignore[arg-type]


def test_the_readers_take_only_their_own_values() -> None:
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    node.meta[FOLD_META_KEY] = {1: None}  # not a mark: no FoldMark
    node.meta[REASON_META_KEY] = "declined"
    assert fold_mark_of(node) is None and reason_of(node) is None
    mark, reason = FoldMark(FoldOptions(), ((1, None),)), GemmReason("declined", "XNF501")
    node.meta[FOLD_META_KEY], node.meta[REASON_META_KEY] = mark, reason
    assert fold_mark_of(node) is mark and reason_of(node) is reason
