"""A grammar of small models with computed GEMM weights, for differential testing.

The problem: the hand-written fixtures and the property test in
``tests/end_to_end/test_generated_models.py`` each cover one way of computing a weight on one layer
kind. Bugs live where the arguments the fixtures never vary meet: an ``addmm`` whose
``beta`` is not 1, a bias of shape ``(M, 1)``, a 600-node chain, ``.item()`` of a 0-d
parameter, a table one method gathers from and another multiplies by.

The approach: a seeded generator draws a *description* of a program (`Program`: plain
frozen dataclasses, so ``repr(program)`` is a pasteable reproducer), and `build_program`
turns a description into eval-mode ``nn.Module``s (one per method), example inputs and
dynamic shapes. A weight or bias is an expression tree (`Expr`) over named sources
(parameters, unmutated buffers, lifted constants, optionally parametrized), evaluated in
``forward`` with plain ATen ops, so ``torch.export`` records exactly that computation.
`expected_gemms` says, from the description alone, which GEMMs the documented fold rule
(docs/how-it-works.md, "The pipeline" 2) must fold; the differential test compares that,
eager, and the stock partitioner with what xnnfold produces.

Nothing here lowers or prints: the oracles live in ``tests/end_to_end/test_differential.py`` and
``benchmarks/correctness/differential_campaign.py``.

The modules, one concern each: `_constants` (the grammar's constants and `GenOptions`),
`_description` (the dataclasses), `_walk` (walking descriptions), `_evaluate` (evaluation
and shapes), `_expectations` (the fold rule), `_build` (modules and inputs),
`_draw_expressions` and `_generator` (drawing), `_scenarios` (`generate_program`).
"""

from __future__ import annotations

from tests.support.grammar._build import build_program, BuiltProgram
from tests.support.grammar._constants import GenOptions
from tests.support.grammar._description import (
    Binary,
    Cast,
    Cat,
    Chain,
    DegenerateProgram,
    Expr,
    Flip,
    Gemm,
    ItemScale,
    LowRank,
    Method,
    Narrow,
    Normalize,
    Permute,
    Piece,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Stack,
    Transpose,
    Unary,
)
from tests.support.grammar._evaluate import expr_shape, render_expr
from tests.support.grammar._expectations import Expectation, expected_gemms
from tests.support.grammar._scenarios import generate_program
from tests.support.grammar._walk import (
    expr_uses_cast,
    program_exprs,
    program_kinds,
    sources_of,
    walk_exprs,
)

__all__ = [
    "BuiltProgram",
    "Cast",
    "Cat",
    "Chain",
    "Expectation",
    "Expr",
    "Flip",
    "Gemm",
    "GenOptions",
    "ItemScale",
    "LowRank",
    "Method",
    "Narrow",
    "Normalize",
    "Permute",
    "Piece",
    "Program",
    "Reshape",
    "ScalarOp",
    "Source",
    "Src",
    "Stack",
    "Transpose",
    "Unary",
    "Binary",
    "DegenerateProgram",
    "build_program",
    "expected_gemms",
    "expr_shape",
    "expr_uses_cast",
    "generate_program",
    "program_exprs",
    "program_kinds",
    "render_expr",
    "sources_of",
    "walk_exprs",
]
