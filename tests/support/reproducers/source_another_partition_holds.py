"""Campaign seed 7, program 143: GEMMs in two methods slice one packed source; ``other``
keeps it on portable (an addmm with a scalar bias reads a slice), and ``forward``'s addmm
folds its own slice, so its partition holds the source."""

from __future__ import annotations

from tests.support.grammar import (
    Chain,
    Flip,
    Gemm,
    Method,
    Narrow,
    Normalize,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
)


def source_another_partition_holds() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=7000163000,
        scenario="multi",
        sources=(
            Source(name="s0", shape=(1024,)),
            Source(name="s2", shape=(3,)),
            Source(name="s4", shape=(5,)),
            Source(name="s8", shape=(14,)),
            Source(name="s10", shape=()),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=16,
                spatial=(2, 2),
                batch=1,
                layers=(
                    Gemm(
                        kind="matmul",
                        in_ch=16,
                        out_ch=3,
                        weight=ScalarOp(
                            op="mul",
                            x=Reshape(
                                x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=48),
                                shape=(16, 3),
                            ),
                            value=2.0,
                        ),
                        bias=Normalize(
                            op="min", x=Chain(x=Src(name="s2"), steps=37), dim=None, keepdim=True
                        ),
                        act=3,
                    ),
                    Gemm(
                        kind="addmm",
                        in_ch=3,
                        out_ch=5,
                        weight=ScalarOp(
                            op="mul",
                            x=Reshape(
                                x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=15),
                                shape=(3, 5),
                            ),
                            value=2.0,
                        ),
                        bias=Normalize(
                            op="var", x=Flip(x=Src(name="s4"), dims=(0,)), dim=0, keepdim=True
                        ),
                    ),
                ),
            ),
            Method(
                name="other",
                kind="chain",
                in_ch=16,
                spatial=(4, 5),
                batch=2,
                layers=(
                    Gemm(
                        kind="addmm",
                        in_ch=16,
                        out_ch=14,
                        weight=ScalarOp(
                            op="mul",
                            x=Reshape(
                                x=Narrow(
                                    how="narrow", x=Src(name="s0"), dim=0, start=15, length=224
                                ),
                                shape=(16, 14),
                            ),
                            value=0.5,
                        ),
                        bias=Reshape(x=Src(name="s8"), shape=(14,)),
                        beta=0.5,
                    ),
                    Gemm(
                        kind="addmm",
                        in_ch=14,
                        out_ch=16,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=239, length=224),
                            shape=(14, 16),
                        ),
                        bias=Src(name="s10"),
                        alpha=-1.5,
                        beta=2.0,
                        bias_shape="scalar",
                    ),
                ),
            ),
        ),
    )
