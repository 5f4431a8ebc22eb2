"""Drawing GEMMs and chain methods from a seeded stream (`_Gen`); the scenarios that
combine them are in `_scenarios`."""

from __future__ import annotations

import math
from typing import Optional

from tests.support.grammar._constants import (
    ADDMM_BIAS_SHAPES,
    ADDMM_SCALARS,
    ANY_RANK_KINDS,
    CONV_KINDS,
    GEMM_KINDS,
    MAX_CHANNELS,
    MAX_EXTENT,
    ROW_BIAS_SHAPES,
)
from tests.support.grammar._description import (
    Expr,
    Gemm,
    Method,
)
from tests.support.grammar._draw_expressions import _ExpressionDraws


class _Gen(_ExpressionDraws):
    """Draws one program from ``rng``; sources accumulate in ``self.sources``."""

    # -- GEMMs -----------------------------------------------------------------------

    def conv_geometry(
        self, kind: str, cin: int, spatial: tuple[int, ...]
    ) -> Optional[dict[str, int]]:
        rng = self.rng
        transposed = kind.startswith("conv_transpose")
        for _ in range(40):
            k = rng.choice((1, 2, 3, 5))
            s = rng.choice((1, 1, 2, 3))
            d = rng.choice((1, 1, 2))
            p = rng.choice((0, k // 2, k // 2 + 1, k))
            divisors = [g for g in range(1, cin + 1) if cin % g == 0]
            g = cin if rng.random() < 0.25 else rng.choice(divisors)
            cout = g * rng.randint(1, max(1, 16 // g))
            if cout > MAX_CHANNELS:
                continue
            op = 0
            if transposed:
                op = rng.randrange(max(s, d))
                outs = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n in spatial]
            else:
                outs = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n in spatial]
            if all(1 <= o <= MAX_EXTENT for o in outs):
                return dict(
                    kernel=k,
                    stride=s,
                    padding=p,
                    dilation=d,
                    groups=g,
                    out_ch=cout,
                    output_padding=op,
                    out=tuple(outs),  # type: ignore[dict-item]
                )
        return None

    def gemm(
        self,
        kind: str,
        cin: int,
        spatial: tuple[int, ...],
        batch: int,
        *,
        dynamic: bool,
        out_ch: Optional[int] = None,
    ) -> tuple[Gemm, tuple[int, ...], int]:
        """A GEMM of ``kind`` on (batch, cin, *spatial); returns it, the spatial shape
        and the batch after it."""
        rng = self.rng
        if kind in CONV_KINDS:
            rank = 2 if kind.endswith("2d") else 1
            seen = spatial
            if rank == 1 and len(spatial) == 2:
                seen = (spatial[0] * spatial[1],)
            elif rank == 2 and len(spatial) == 1:
                seen = (1, spatial[0])
            geo = self.conv_geometry(kind, cin, seen)
            if geo is None or math.prod(seen) > 2 * MAX_EXTENT:
                kind = "linear"
            else:
                cout, g, k = geo["out_ch"], geo["groups"], geo["kernel"]
                taps = (k,) * rank
                if kind.startswith("conv_transpose"):
                    wshape = (cin, cout // g, *taps)
                else:
                    wshape = (cout, cin // g, *taps)
                module = rng.random() < 0.3
                bias: Optional[Expr] = None
                if module:
                    weight: Expr = self.source(wshape, kind="param", dtype="float32")
                    if rng.random() < 0.6:
                        bias = self.source(
                            (cout,),
                            kind="param",
                            dtype="float32",
                            param=rng.choice(("none", "none", "weight_norm_none")),
                        )
                else:
                    weight = self.arg(wshape)
                    bias = self.arg((cout,)) if rng.random() < 0.7 else None
                layer = Gemm(
                    kind,
                    cin,
                    cout,
                    weight,
                    bias,
                    k,
                    geo["stride"],
                    geo["padding"],
                    geo["dilation"],
                    g,
                    geo["output_padding"],
                    module=module,
                )
                return layer, tuple(geo["out"]), batch  # type: ignore[arg-type]
        n = out_ch or rng.randint(2, 16)
        act = 2
        if kind in ANY_RANK_KINDS:
            act = rng.choices((1, 2, 3), (0.15 if not dynamic else 0.0, 0.6, 0.25))[0]
        rows = batch * math.prod(spatial)
        if kind in ("linear", "matmul_t"):
            wshape = (n, cin)
        else:
            wshape = (cin, n)
        module = kind == "linear" and rng.random() < 0.25
        alpha = beta = 1.0
        bias_shape = "N"
        bias = None
        if module:
            weight = self.source(wshape, kind="param", dtype="float32")
            if rng.random() < 0.6:
                bias = self.source((n,), kind="param", dtype="float32")
        else:
            weight = self.arg(wshape)
            if kind == "addmm":
                if rng.random() < 0.6:
                    alpha, beta = rng.choice(ADDMM_SCALARS), rng.choice(ADDMM_SCALARS)
                shapes = [s for s in ADDMM_BIAS_SHAPES if not dynamic or s not in ROW_BIAS_SHAPES]
                bias_shape = rng.choice(shapes)
                bshape = {"N": (n,), "1N": (1, n), "scalar": (), "M1": (rows, 1), "MN": (rows, n)}[
                    bias_shape
                ]
                bias = self.arg(bshape)
            elif rng.random() < 0.6:
                bias = self.arg((n,))
        layer = Gemm(
            kind,
            cin,
            n,
            weight,
            bias,
            act=act,
            alpha=alpha,
            beta=beta,
            bias_shape=bias_shape,
            module=module,
        )
        if act == 1:
            return layer, (1,), 1
        return layer, spatial, batch

    def chain_method(
        self,
        name: str,
        *,
        kinds: Optional[list[str]] = None,
        dynamic: Optional[bool] = None,
        cin: Optional[int] = None,
    ) -> Method:
        rng = self.rng
        if dynamic is None:
            dynamic = rng.random() < 0.2
        cin = cin or rng.randint(1, 8)
        spatial: tuple[int, ...] = (
            (rng.randint(3, 12),) if rng.random() < 0.6 else (rng.randint(2, 5), rng.randint(2, 5))
        )
        batch = rng.randint(2, 3) if dynamic else rng.randint(1, 2)
        if kinds is None:
            kinds = [rng.choice(GEMM_KINDS) for _ in range(rng.randint(1, self.options.max_layers))]
        layers = []
        channels, shape, b = cin, spatial, batch
        for kind in kinds:
            layer, shape, b = self.gemm(kind, channels, shape, b, dynamic=dynamic)
            layers.append(layer)
            channels = layer.out_ch
        return Method(name, "chain", cin, spatial, batch, tuple(layers), dynamic=dynamic)
