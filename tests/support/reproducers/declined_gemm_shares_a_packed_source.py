"""Campaign seed 3, program 115: ``forward``'s addmm has a bias per row, so it stays on
portable with its computed weight; ``other`` reads another slice of the same packed source."""

from __future__ import annotations

from tests.support.grammar import Gemm, Method, Narrow, Program, Reshape, Source, Src


def declined_gemm_shares_a_packed_source() -> Program:
    """The program description (`tests.support.grammar`)."""
    return Program(
        seed=3000123000,
        scenario="multi",
        sources=(Source(name="s0", shape=(1024,)), Source(name="s2", shape=(30, 13))),
        methods=(
            Method(
                name="forward",
                kind="chain",
                in_ch=32,
                spatial=(5, 3),
                batch=2,
                layers=(
                    Gemm(
                        kind="addmm",
                        in_ch=32,
                        out_ch=13,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=0, length=416),
                            shape=(32, 13),
                        ),
                        bias=Src(name="s2"),
                        bias_shape="MN",
                    ),
                ),
            ),
            Method(
                name="other",
                kind="chain",
                in_ch=32,
                spatial=(3, 2),
                batch=3,
                layers=(
                    Gemm(
                        kind="matmul",
                        in_ch=32,
                        out_ch=13,
                        weight=Reshape(
                            x=Narrow(how="narrow", x=Src(name="s0"), dim=0, start=416, length=416),
                            shape=(32, 13),
                        ),
                    ),
                ),
                dynamic=True,
            ),
        ),
    )
