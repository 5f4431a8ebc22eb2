"""An op node's argument as its schema names it, wherever the graph put it.

An exported graph usually passes an ATen op's arguments by position, but a graph built or
rewritten by hand (or by a pass) may pass one by keyword, and trailing arguments left at
their defaults are often omitted. The rules that read an argument (the argument checks,
the ATen plan, the tanh GELU rule) read it through `argument`, so none of them mistakes a
keyword for a default.
"""

from __future__ import annotations

from torch.fx import Node

__all__ = ["argument"]


def argument(node: Node, index: int, name: str, default: object) -> object:
    """``node``'s argument at position ``index`` of its op's schema, named ``name``: given
    by position, else by keyword, else ``default`` (the schema's default)."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)
