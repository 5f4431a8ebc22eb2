"""Depth-first walks over an fx graph, one node at a time.

The passes follow a node's inputs or users through the graph many ways (through
everything, up to the GEMMs, only inside a set), often with a bound on the work over a
large graph. `walk` is the one loop they share; each caller says where a step may go and
bounds it with ``itertools.islice``. `post_order` is the one walk that must finish a
node's inputs before the node itself: a weight computation is evaluated in its order.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional

from torch.fx import Node

__all__ = ["post_order", "walk"]


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


def post_order(
    root: Node, step: Callable[[Node], list[Node]], *, limit: int
) -> Optional[list[Node]]:
    """``root`` and each node reachable from it through ``step``, once, every node after
    the ones its ``step`` leads to (inputs first when ``step`` gives a node's inputs), in
    ``step``'s order; None as soon as more than ``limit`` nodes are reached, so a large
    graph costs no more than ``limit`` nodes."""
    order: list[Node] = []
    seen: set[Node] = {root}
    # (node, index of the next of its steps to take)
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        following = step(node)
        if i < len(following):
            stack.append((node, i + 1))
            child = following[i]
            if child not in seen:
                seen.add(child)
                if len(seen) > limit:
                    return None
                stack.append((child, 0))
        else:
            order.append(node)
    return order
