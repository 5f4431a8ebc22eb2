"""The graph walks the passes share: which nodes they reach, in what order, at what cost."""

from __future__ import annotations

import itertools
from typing import Callable

import torch
from torch.fx import Graph, Node

from xnnfold.passes._graph_walk import post_order, walk


def _diamond() -> tuple[Graph, dict[str, Node]]:
    """a -> b, a -> c, (b, c) -> d: d's inputs share an input."""
    graph = Graph()
    a = graph.placeholder("a")
    b = graph.call_function(torch.neg, (a,))
    c = graph.call_function(torch.abs, (a,))
    d = graph.call_function(torch.add, (b, c))
    graph.output(d)
    return graph, {"a": a, "b": b, "c": c, "d": d}


def _chain(length: int) -> list[Node]:
    graph = Graph()
    nodes = [graph.placeholder("x")]
    for _ in range(length - 1):
        nodes.append(graph.call_function(torch.neg, (nodes[-1],)))
    graph.output(nodes[-1])
    return nodes


def _inputs(node: Node) -> list[Node]:
    return node.all_input_nodes


def _counting(stepped: list[Node]) -> Callable[[Node], list[Node]]:
    """`_inputs`, recording each node it steps from."""

    def step(node: Node) -> list[Node]:
        stepped.append(node)
        return node.all_input_nodes

    return step


def test_post_order_puts_every_input_before_its_reader_once() -> None:
    _, n = _diamond()
    order = post_order(n["d"], _inputs, limit=10)
    assert order == [n["a"], n["b"], n["c"], n["d"]]


def test_post_order_declines_past_its_limit() -> None:
    chain = _chain(5)
    assert post_order(chain[-1], _inputs, limit=4) is None
    assert post_order(chain[-1], _inputs, limit=5) == chain


def test_post_order_past_its_limit_steps_no_further() -> None:
    chain = _chain(200)
    stepped: list[Node] = []
    assert post_order(chain[-1], _counting(stepped), limit=10) is None
    assert len(set(stepped)) <= 11


def test_walk_reaches_each_node_once() -> None:
    _, n = _diamond()
    reached = list(walk([n["d"]], _inputs))
    assert sorted(node.name for node in reached) == sorted(node.name for node in n.values())
    assert reached[0] is n["d"]


def test_walk_taken_in_part_steps_no_further() -> None:
    chain = _chain(200)
    stepped: list[Node] = []
    taken = list(itertools.islice(walk([chain[-1]], _counting(stepped)), 3))
    assert taken == chain[-1:-4:-1]
    assert len(stepped) <= 3
