"""Campaign seed 3, program 236: a ``conv_transpose2d`` whose stored kernel is also read by
an elementwise op (``abs``)."""

from __future__ import annotations

from tests.support.grammar import Gemm, Method, Narrow, Piece, Program, Source, Src, Unary


def shared_2d_kernel() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=3000244000,
        scenario="chain",
        sources=(
            Source(name="s0", shape=(7, 14, 2, 2), kind="buffer"),
            Source(name="s1", shape=(48,), kind="const", dtype="bfloat16"),
            Source(name="s2", shape=(16, 7, 1)),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=7,
                spatial=(6,),
                batch=2,
                layers=(
                    Gemm(
                        kind="conv_transpose2d",
                        in_ch=7,
                        out_ch=14,
                        weight=Src(name="s0"),
                        bias=Narrow(
                            how="slice",
                            x=Piece(
                                how="chunk",
                                x=Unary(op="reciprocal", x=Src(name="s1")),
                                dim=0,
                                pieces=3,
                                index=2,
                            ),
                            dim=0,
                            start=2,
                            length=14,
                        ),
                        kernel=2,
                    ),
                    Gemm(
                        kind="conv1d",
                        in_ch=14,
                        out_ch=16,
                        weight=Src(name="s2"),
                        dilation=2,
                        groups=2,
                        module=True,
                    ),
                ),
                side=(Unary(op="abs", x=Src(name="s0")),),
                dynamic=True,
            ),
        ),
    )
