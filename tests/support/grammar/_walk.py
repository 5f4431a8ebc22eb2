"""Walking descriptions: sub-expressions, the sources an expression reads, every
expression of a program, and the labels the campaign counts programs by."""

from __future__ import annotations

from typing import Iterator, Optional

from tests.support.grammar._description import (
    Binary,
    Cast,
    Cat,
    Chain,
    Expr,
    ItemScale,
    LowRank,
    Program,
    Source,
    Src,
    Stack,
)


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Src):
        return ()
    if isinstance(expr, (Cat, Stack)):
        return expr.parts
    if isinstance(expr, Binary):
        return (expr.x, expr.y)
    if isinstance(expr, LowRank):
        return (expr.a, expr.b)
    return (expr.x,)


def walk_exprs(expr: Expr) -> Iterator[Expr]:
    """Every sub-expression, ``expr`` first (iterative: chains may be long)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_children(node))


def sources_of(expr: Expr) -> frozenset[str]:
    """Names of every source ``expr`` reads (0-d ``.item()`` scalars included)."""
    names: set[str] = set()
    for node in walk_exprs(expr):
        if isinstance(node, Src):
            names.add(node.name)
        elif isinstance(node, ItemScale):
            names.add(node.scalar)
    return frozenset(names)


def expr_uses_cast(expr: Expr, sources: dict[str, Source]) -> bool:
    """True when ``expr`` rounds through half/bfloat16 or reads a half/bfloat16 source."""
    for node in walk_exprs(expr):
        if isinstance(node, Cast):
            return True
        if isinstance(node, Src) and sources[node.name].dtype != "float32":
            return True
    return False


def program_exprs(program: Program) -> Iterator[tuple[str, Optional[int], str, Expr]]:
    """(method, layer index or None, role, expr) for every expression of the program;
    roles: ``weight``, ``bias``, ``side``, ``table``."""
    for method in program.methods:
        for i, layer in enumerate(method.layers):
            yield method.name, i, "weight", layer.weight
            if layer.bias is not None:
                yield method.name, i, "bias", layer.bias
        for e in method.side:
            yield method.name, None, "side", e
        # (An mm/matmul bias is added after the GEMM; expected_gemms treats it as a side use.)
        if method.table is not None:
            yield method.name, None, "table", method.table


def program_kinds(program: Program) -> tuple[str, ...]:
    """Labels for per-kind counts: the scenario, GEMM kinds, and notable features."""
    labels = {f"scenario:{program.scenario}"}
    sources = {s.name: s for s in program.sources}
    for method in program.methods:
        if method.dynamic:
            labels.add("dynamic")
        for layer in method.layers:
            labels.add(f"gemm:{layer.kind}")
            if layer.module:
                labels.add("module_call")
            if layer.kind == "addmm":
                labels.add(f"addmm_bias:{layer.bias_shape}")
                if (layer.alpha, layer.beta) != (1.0, 1.0):
                    labels.add("addmm_scaled")
    for _, _, _, e in program_exprs(program):
        for node in walk_exprs(e):
            labels.add(f"expr:{type(node).__name__}")
            if isinstance(node, Chain) and node.steps >= 300:
                labels.add("long_chain")
        for name in sources_of(e):
            src = sources[name]
            if src.param != "none":
                labels.add(f"param:{src.param}")
            if src.dtype != "float32":
                labels.add("half_source")
    if len(program.methods) > 1:
        labels.add("multi_method")
    return tuple(sorted(labels))
