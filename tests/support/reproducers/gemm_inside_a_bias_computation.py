"""Campaign seed 2, program 210: an addmm whose bias is ``mm(a, 3 - p)``, a GEMM whose
own weight is computed too."""

from __future__ import annotations

from tests.support.grammar import (
    Gemm,
    LowRank,
    Method,
    Normalize,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Unary,
)


def gemm_inside_a_bias_computation() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=2000215000,
        scenario="chain",
        sources=(
            Source(name="s0", shape=(2, 11)),
            Source(name="s1", shape=(2,), dtype="float16"),
            Source(name="s2", shape=(2, 11)),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=2,
                spatial=(8,),
                batch=1,
                layers=(
                    Gemm(
                        kind="addmm",
                        in_ch=2,
                        out_ch=11,
                        weight=Normalize(op="amin", x=Src(name="s0"), dim=0, keepdim=False),
                        bias=LowRank(
                            a=Reshape(x=Src(name="s1"), shape=(1, 2), view=True),
                            b=ScalarOp(op="rsub", x=Src(name="s2"), value=3.0),
                            shape=(1, 11),
                        ),
                        bias_shape="1N",
                    ),
                ),
                side=(Unary(op="abs", x=Src(name="s0")),),
            ),
        ),
    )
