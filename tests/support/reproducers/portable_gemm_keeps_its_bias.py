"""Campaign seed 11, program 117: a convolution whose low-rank weight grows when folded
stays on portable and reads its bf16 bias there; the next layer's bias reads it too."""

from __future__ import annotations

from tests.support.grammar import (
    Binary,
    Gemm,
    LowRank,
    Method,
    Normalize,
    Permute,
    Program,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Transpose,
    Unary,
)


def portable_gemm_keeps_its_bias() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=11000149000,
        scenario="chain",
        sources=(
            Source(name="s0", shape=(15, 2)),
            Source(name="s1", shape=(2, 9), param="legacy_weight_norm"),
            Source(name="s2", shape=(15,), dtype="bfloat16"),
            Source(name="s3", shape=(15, 15, 3, 3), dtype="float16"),
            Source(name="s4", shape=(3, 15, 3, 15), dtype="bfloat16"),
            Source(name="s5", shape=(15,), param="weight_norm_none"),
        ),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=3,
                spatial=(2, 4),
                batch=1,
                layers=(
                    Gemm(
                        kind="conv1d",
                        in_ch=3,
                        out_ch=15,
                        weight=LowRank(a=Src(name="s0"), b=Src(name="s1"), shape=(15, 3, 3)),
                        bias=Src(name="s2"),
                        kernel=3,
                        padding=3,
                        dilation=2,
                    ),
                    Gemm(
                        kind="conv_transpose2d",
                        in_ch=15,
                        out_ch=15,
                        weight=Binary(
                            op="maximum",
                            x=Normalize(
                                op="min",
                                x=Unary(op="tanh", x=Src(name="s3")),
                                dim=None,
                                keepdim=False,
                            ),
                            y=Permute(
                                x=Transpose(x=Src(name="s4"), dim0=2, dim1=0), dims=(1, 3, 0, 2)
                            ),
                        ),
                        bias=ScalarOp(
                            op="add",
                            x=Reshape(
                                x=Binary(op="add", x=Src(name="s2"), y=Src(name="s5")), shape=(15,)
                            ),
                            value=0.5,
                        ),
                        kernel=3,
                        padding=1,
                    ),
                ),
            ),
        ),
    )
