"""Depth-first walks over an fx graph, one node at a time.

The passes follow a node's inputs or users through the graph many ways (through
everything, up to the GEMMs, only inside a set), often with a bound on the work over a
large graph. `walk` is the one loop they share; each caller says where a step may go and
bounds it with ``itertools.islice``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from torch.fx import Node

__all__ = ["walk"]


def walk(starts: Iterable[Node], step: Callable[[Node], Iterable[Node]]) -> Iterator[Node]:
    """Each node reachable from ``starts`` through ``step``, once, depth first (the last
    start first). Lazy: a caller that stops early, or takes ``islice(walk(...), n)``,
    visits no more."""
    seen: set[Node] = set()
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(step(node))
