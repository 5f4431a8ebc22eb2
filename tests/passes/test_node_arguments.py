"""`argument`: an op node's argument by position, else by keyword, else its default."""

from __future__ import annotations

import torch

from xnnfold.passes._node_arguments import argument


def _gelu_node(args: tuple[object, ...], kwargs: dict[str, object]) -> torch.fx.Node:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    return graph.call_function(torch.ops.aten.gelu.default, (x, *args), kwargs)


def test_a_positional_argument_is_read_from_its_position() -> None:
    assert argument(_gelu_node(("tanh",), {}), 1, "approximate", "none") == "tanh"


def test_a_keyword_argument_is_read_by_its_name() -> None:
    assert argument(_gelu_node((), {"approximate": "tanh"}), 1, "approximate", "none") == "tanh"


def test_an_omitted_argument_is_its_default() -> None:
    assert argument(_gelu_node((), {}), 1, "approximate", "none") == "none"
