"""Shrinking a program that fails a differential oracle, and the reproducer it is
reported with.

`shrink` greedily simplifies a failing program description (`tests.support.grammar`)
while `tests.support.differential.check_program` still fails the same oracle;
`reproducer` renders a program and its failure as a snippet to paste at the repository
root, and `failure_report` does both for every failure of an outcome. They are apart from
the oracles because only a failure needs them: the oracles judge a program, these make
the judgement small enough to read. Callers: `tests/end_to_end/test_differential.py` and
`benchmarks/correctness/differential_campaign.py`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Optional

from tests.support.differential import check_program, Failure, ORACLE_NAMES, Outcome
from tests.support.grammar import (
    build_program,
    Chain,
    DegenerateProgram,
    Expr,
    expr_shape,
    Program,
    program_exprs,
    program_kinds,
    render_expr,
    Source,
    sources_of,
    Src,
    walk_exprs,
)


def _fresh_source(program: Program, shape: tuple[int, ...]) -> tuple[Program, Src]:
    names = {s.name for s in program.sources}
    k = len(names)
    while f"z{k}" in names:
        k += 1
    src = Source(f"z{k}", shape)
    return replace(program, sources=(*program.sources, src)), Src(src.name)


def _replace_arg(program: Program, m: int, i: int, role: str, expr: Optional[Expr]) -> Program:
    method = program.methods[m]
    layers = list(method.layers)
    layers[i] = replace(layers[i], **{role: expr})
    methods = list(program.methods)
    methods[m] = replace(method, layers=tuple(layers))
    return replace(program, methods=tuple(methods))


def _simpler_exprs(program: Program, expr: Expr) -> Iterator[tuple[Program, Expr]]:
    sources = {s.name: s for s in program.sources}
    shape = expr_shape(expr, sources)
    if isinstance(expr, Chain) and expr.steps > 2:
        yield program, replace(expr, steps=expr.steps // 2)
    for child in list(walk_exprs(expr))[1:6]:
        try:
            if expr_shape(child, sources) == shape:
                yield program, child
        except Exception:
            continue
    if not isinstance(expr, Src):
        yield _fresh_source(program, shape)


def _candidates(program: Program) -> Iterator[Program]:
    if len(program.methods) > 1:
        for m in range(len(program.methods)):
            yield replace(program, methods=program.methods[:m] + program.methods[m + 1 :])
    for m, method in enumerate(program.methods):
        methods = list(program.methods)
        for k in range(1, len(method.layers)):
            methods[m] = replace(method, layers=method.layers[:k])
            yield replace(program, methods=tuple(methods))
        if method.side:
            methods[m] = replace(method, side=())
            yield replace(program, methods=tuple(methods))
    for m, method in enumerate(program.methods):
        for i, layer in enumerate(method.layers):
            if layer.module:
                continue
            if layer.bias is not None and layer.kind != "addmm":
                yield _replace_arg(program, m, i, "bias", None)
            if layer.kind == "addmm" and (layer.alpha, layer.beta) != (1.0, 1.0):
                for fields in ({"alpha": 1.0}, {"beta": 1.0}):
                    methods = list(program.methods)
                    layers = list(method.layers)
                    layers[i] = replace(layer, **fields)
                    methods[m] = replace(method, layers=tuple(layers))
                    yield replace(program, methods=tuple(methods))
            for role in ("weight", "bias"):
                expr = getattr(layer, role)
                if expr is None:
                    continue
                for prog, simpler in _simpler_exprs(program, expr):
                    yield _replace_arg(prog, m, i, role, simpler)


def _prune(program: Program) -> Program:
    used = {n for _, _, _, e in program_exprs(program) for n in sources_of(e)}
    return replace(program, sources=tuple(s for s in program.sources if s.name in used))


def shrink(program: Program, oracle: str, *, attempts: int) -> tuple[Program, Outcome]:
    """Greedy: take the first simpler candidate that still fails ``oracle``, repeat;
    at most ``attempts`` re-checks (deterministic: no clock involved)."""
    oracles = tuple(sorted({oracle, "b"} if oracle in ("a", "d") else {oracle}))
    best = program
    best_outcome: Optional[Outcome] = None
    tried = 0
    improved = True
    while improved and tried < attempts:
        improved = False
        for candidate in _candidates(best):
            if tried >= attempts:
                break
            candidate = _prune(candidate)
            try:
                build_program(candidate)
            except (DegenerateProgram, RuntimeError, ValueError, IndexError):
                continue
            tried += 1
            outcome = check_program(candidate, oracles)
            if oracle in outcome.failed:
                best, best_outcome, improved = candidate, outcome, True
                break
    return best, best_outcome or check_program(best, oracles)


def describe(program: Program) -> str:
    """Comment lines: what each method computes, for a reader of the reproducer."""
    lines = [f"# scenario {program.scenario}; kinds: {', '.join(program_kinds(program))}"]
    for method in program.methods:
        lines.append(
            f"# method {method.name!r} ({method.kind}, batch {method.batch}"
            f"{' dynamic' if method.dynamic else ''}, in {method.in_ch}x{method.spatial})"
        )
        for i, layer in enumerate(method.layers):
            geo = ""
            if layer.kind.startswith("conv"):
                geo = (
                    f" k={layer.kernel} s={layer.stride} p={layer.padding} d={layer.dilation} "
                    f"g={layer.groups} op={layer.output_padding}"
                )
            elif layer.kind == "addmm":
                geo = f" alpha={layer.alpha} beta={layer.beta} bias={layer.bias_shape}"
            lines.append(
                f"#   layers.{i}: {layer.kind} {layer.in_ch}->{layer.out_ch}{geo} act={layer.act}"
                f"{' (module call)' if layer.module else ''}"
            )
            lines.append(f"#     weight = {render_expr(layer.weight)[:200]}")
            if layer.bias is not None:
                lines.append(f"#     bias   = {render_expr(layer.bias)[:200]}")
        for e in method.side:
            lines.append(f"#   side use: y + tanh({render_expr(e)}).mean()")
        if method.table is not None:
            lines.append(f"#   embedding(idx, {render_expr(method.table)})")
    return "\n".join(lines)


def reproducer(program: Program, failure: Failure) -> str:
    """A snippet to paste into a Python shell at the repository root."""
    return "\n".join(
        [
            f"# oracle ({failure.oracle}) {ORACLE_NAMES[failure.oracle]}: {failure.message}",
            describe(program),
            "from tests.support.grammar import *",
            "from tests.support.differential import check_program",
            "from tests.support.quantized_differential import check_quantized",
            f"program = {program!r}",
            "built = build_program(program)  # .modules / .inputs / .dynamic_shapes per method",
            "outcome = check_program(program)",
            "print(outcome.failures, outcome.notes)",
        ]
    )


def failure_report(outcome: Outcome, *, attempts: int) -> str:
    """Every failure of ``outcome``, each with a (shrunk) reproducer."""
    parts = []
    for failure in outcome.failures:
        small, small_outcome = shrink(outcome.program, failure.oracle, attempts=attempts)
        shown = next((f for f in small_outcome.failures if f.oracle == failure.oracle), failure)
        parts.append(reproducer(small, shown))
    return "\n\n".join(parts)
