"""Read-only helpers over libcst nodes: source text and excerpts, walks, assigned and
parameter names, the environment of a ``forward``, and the checkpoint-loader shapes."""

from __future__ import annotations

from typing import Final, Iterator, Optional

import libcst as cst
from libcst.helpers import get_full_name_for_node

from xnnfold.rewriter.codemod._sites import Forward

_EXCERPT_CHARS: Final = 48


def source_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def excerpt_of(node: cst.CSTNode) -> str:
    text = " ".join(source_of(node).split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."


def walk_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def assigned_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from assigned_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from assigned_names(target.value)


def forward_env(function: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """Every local name of ``forward`` with every expression assigned to it."""
    env: dict[str, list[cst.BaseExpression]] = {}
    for node in walk_nodes(function.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for name in assigned_names(target.target):
                    env.setdefault(name, []).append(node.value)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and node.value is not None:
            for name in assigned_names(node.target):
                env.setdefault(name, []).append(node.value)
        elif isinstance(node, cst.NamedExpr):
            for name in assigned_names(node.target):
                env.setdefault(name, []).append(node.value)
    return env


def param_names(params: cst.Parameters) -> list[str]:
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        names.append(params.star_arg.name.value)
    names.extend(p.name.value for p in params.kwonly_params)
    if params.star_kwarg is not None:
        names.append(params.star_kwarg.name.value)
    return names


def own_state_dict(expr: cst.BaseExpression) -> Optional[str]:
    """``owner`` when ``expr`` is ``owner.state_dict()`` (or its ``.keys()``/``.items()``)."""
    if (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("keys", "items")
    ):
        expr = expr.func.value
    if (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "state_dict"
    ):
        return excerpt_of(expr.func.value)
    return None


def tolerant_copy(node: cst.CSTNode) -> bool:
    """A loop body that skips keys it cannot find: try/except, ``.get(``, or ``k in d``."""
    for child in walk_nodes(node):
        if isinstance(child, cst.Try):
            return True
        if (
            isinstance(child, cst.Call)
            and isinstance(child.func, cst.Attribute)
            and child.func.attr.value == "get"
        ):
            return True
        if isinstance(child, cst.Comparison) and any(
            isinstance(c.operator, (cst.In, cst.NotIn)) for c in child.comparisons
        ):
            return True
    return False


def is_plain(expr: cst.BaseExpression, forward: Forward, seen: frozenset[str]) -> bool:
    """``self.weight``, or a local name only ever bound to such an attribute."""
    if isinstance(expr, cst.Attribute):
        full = get_full_name_for_node(expr)
        return full is not None and full.startswith(f"{forward.self_name}.")
    if isinstance(expr, cst.Name) and expr.value in forward.env and expr.value not in seen:
        return all(
            is_plain(value, forward, seen | {expr.value}) for value in forward.env[expr.value]
        )
    return False
