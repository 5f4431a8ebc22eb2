"""Campaign seed 1, program 170: an addmm whose bias computation keeps ``stack``
undecomposed, in two methods that slice one packed source, which `other` also reads."""

from __future__ import annotations

from tests.support.grammar import (
    Binary,
    Cast,
    Gemm,
    Method,
    Narrow,
    Piece,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Stack,
)


def kept_ops_beside_a_source_another_method_stores() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=1000172000,
        scenario="multi",
        sources=(
            Source(name="s0", shape=(1024,)),
            Source(name="s2", shape=(8,), kind="const"),
            Source(name="s4", shape=(4,)),
            Source(name="s5", shape=(4,), kind="const"),
            Source(name="s6", shape=(3, 1)),
            Source(name="s9", shape=(6,), kind="const"),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=16,
                spatial=(4, 2),
                batch=3,
                layers=(
                    Gemm(
                        kind="addmm",
                        in_ch=16,
                        out_ch=8,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=128),
                            shape=(16, 8),
                        ),
                        bias=Cast(x=Stack(parts=(Src(name="s2"),), dim=0), dtype="bfloat16"),
                        alpha=-1.5,
                        beta=0.0,
                        bias_shape="1N",
                    ),
                    Gemm(
                        kind="matmul",
                        in_ch=8,
                        out_ch=4,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=32),
                            shape=(8, 4),
                        ),
                        bias=Binary(
                            op="sub",
                            x=Binary(op="div", x=Src(name="s4"), y=Src(name="s5")),
                            y=Piece(how="unbind", x=Src(name="s6"), dim=0, pieces=3, index=1),
                        ),
                    ),
                ),
                dynamic=True,
            ),
            Method(
                name="other",
                kind="chain",
                in_ch=16,
                spatial=(5, 3),
                batch=2,
                layers=(
                    Gemm(
                        kind="matmul_t",
                        in_ch=16,
                        out_ch=4,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=64),
                            shape=(4, 16),
                        ),
                        bias=Narrow(how="narrow", x=Src(name="s9"), dim=0, start=0, length=4),
                    ),
                    Gemm(
                        kind="linear",
                        in_ch=4,
                        out_ch=2,
                        weight=ScalarOp(
                            op="mul",
                            x=Reshape(
                                x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=64, length=8),
                                shape=(2, 4),
                            ),
                            value=2.0,
                        ),
                    ),
                ),
                side=(Src(name="s0"),),
                dynamic=True,
            ),
        ),
    )
