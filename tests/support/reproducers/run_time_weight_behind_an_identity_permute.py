"""Campaign seed 5, program 151: an addmm whose weight is a low-rank product behind an
identity permute (``.permute(0, 1)``), too large to fold."""

from __future__ import annotations

from tests.support.grammar import (
    Binary,
    Cast,
    Gemm,
    LowRank,
    Method,
    Narrow,
    Normalize,
    Permute,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Unary,
)


def run_time_weight_behind_an_identity_permute() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=5000165000,
        scenario="addmm",
        sources=(
            Source(name="s0", shape=(9, 3), kind="const"),
            Source(name="s1", shape=(9, 1), param="spectral_norm"),
            Source(name="s2", shape=(9, 4)),
            Source(name="s3", shape=(4, 3), kind="buffer"),
            Source(name="s4", shape=(10, 2), kind="buffer"),
            Source(name="s5", shape=(1, 10), kind="const"),
            Source(name="s6", shape=(1, 10)),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=3,
                spatial=(4,),
                batch=2,
                layers=(
                    Gemm(
                        kind="addmm",
                        in_ch=3,
                        out_ch=9,
                        weight=Unary(op="sin", x=Reshape(x=Src(name="s0"), shape=(3, 9))),
                        bias=Cast(
                            x=Normalize(
                                op="std",
                                x=Permute(x=Src(name="s1"), dims=(1, 0)),
                                dim=1,
                                keepdim=False,
                            ),
                            dtype="bfloat16",
                        ),
                        beta=0.0,
                        bias_shape="1N",
                    ),
                    Gemm(
                        kind="addmm",
                        in_ch=9,
                        out_ch=10,
                        weight=LowRank(
                            a=Narrow(
                                how="narrow",
                                x=LowRank(a=Src(name="s2"), b=Src(name="s3"), shape=(9, 3)),
                                dim=1,
                                start=0,
                                length=2,
                            ),
                            b=Permute(x=Reshape(x=Src(name="s4"), shape=(2, 10)), dims=(0, 1)),
                            shape=(9, 10),
                        ),
                        bias=ScalarOp(
                            op="sub",
                            x=Binary(op="add", x=Src(name="s5"), y=Src(name="s6")),
                            value=-1.5,
                        ),
                        bias_shape="1N",
                    ),
                ),
            ),
        ),
    )
