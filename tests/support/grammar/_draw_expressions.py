"""Drawing sources and expressions from a seeded stream (`_ExpressionDraws`, the base of
the generator `_Gen`)."""

from __future__ import annotations

import math
import random
from typing import Optional, Union

from tests.support.grammar._constants import (
    BINARY_OPS,
    GenOptions,
    HALF_DTYPES,
    NARROW_HOWS,
    PARAMETRIZATIONS,
    PIECE_HOWS,
    REDUCTIONS,
    SCALAR_OPS,
    SOURCE_KINDS,
    SPECTRAL,
    SPREAD_REDUCTIONS,
    UNARY_OPS,
)
from tests.support.grammar._description import (
    Binary,
    Cast,
    Cat,
    Chain,
    Expr,
    Flip,
    ItemScale,
    LowRank,
    Narrow,
    Normalize,
    Permute,
    Piece,
    Reshape,
    ScalarOp,
    Source,
    Src,
    Stack,
    Transpose,
    Unary,
)


class _ExpressionDraws:
    """Draws sources and expressions from ``rng``; sources accumulate in ``self.sources``."""

    def __init__(self, rng: random.Random, options: GenOptions) -> None:
        self.rng = rng
        self.options = options
        self.sources: list[Source] = []
        self.reuse = 0.0  # chance that a leaf reuses an existing source of its shape

    # -- sources ---------------------------------------------------------------------

    def source(
        self,
        shape: tuple[int, ...],
        *,
        kind: Optional[str] = None,
        dtype: Optional[str] = None,
        param: Optional[str] = None,
    ) -> Src:
        rng = self.rng
        if self.reuse and kind is None and rng.random() < self.reuse:
            same = [s for s in self.sources if s.shape == shape and s.name[0] == "s"]
            if same:
                return Src(rng.choice(same).name)
        if kind is None:
            kind = rng.choices(SOURCE_KINDS, (0.75, 0.15, 0.1))[0]
        if dtype is None:
            dtype = rng.choices(("float32",) + HALF_DTYPES, (0.86, 0.07, 0.07))[0]
        if param is None:
            # KNOWN UPSTREAM: torch's decomposition of `_weight_norm_interface` on a 1-D
            # tensor with dim=0 normalizes over every element, unlike eager (stock and
            # xnnfold programs both differ from eager); 1-D sources only get dim=None.
            options = [
                p
                for p in PARAMETRIZATIONS
                if p == "none"
                or (
                    len(shape) >= 1
                    and (p not in SPECTRAL or len(shape) >= 2)
                    and (len(shape) >= 2 or p not in ("weight_norm", "legacy_weight_norm"))
                )
            ]
            weights = [4.0 if p == "none" else 0.5 for p in options]
            param = rng.choices(options, weights)[0]
        if kind != "param" or dtype != "float32" or shape == ():
            param = "none"
        name = f"s{len(self.sources)}"
        self.sources.append(Source(name, shape, kind, dtype, param))
        return Src(name)

    def scalar_source(self) -> str:
        kind = self.rng.choice(("param", "buffer"))
        name = f"q{len(self.sources)}"
        self.sources.append(Source(name, (), kind))
        return name

    # -- expressions -----------------------------------------------------------------

    def expr(self, shape: tuple[int, ...], depth: int) -> Expr:
        rng = self.rng
        if depth <= 0:
            return self.source(shape)
        nd = len(shape)
        rules: list[tuple[str, float]] = [
            ("leaf", 1.0),
            ("unary", 3.0),
            ("scalar", 3.0),
            ("binary", 3.0),
            ("normalize", 2.0),
            ("cast", 0.8),
            ("item", 0.8),
            ("chain", 0.6),
        ]
        if nd >= 1:
            rules += [("reshape", 1.5), ("flip", 1.0), ("narrow", 1.5), ("piece", 1.2)]
            if any(n >= 2 for n in shape):
                rules.append(("cat", 1.0))
            if any(n <= 4 for n in shape):
                rules.append(("stack", 0.7))
        if nd >= 2:
            rules += [("permute", 1.0), ("transpose", 1.0), ("lowrank", 0.8)]
        rule = rng.choices([r for r, _ in rules], [w for _, w in rules])[0]
        sub = depth - 1
        if rule == "leaf":
            return self.source(shape)
        if rule == "unary":
            return Unary(rng.choice(UNARY_OPS), self.expr(shape, sub))
        if rule == "scalar":
            op = rng.choice(SCALAR_OPS)
            value = rng.choice((0.5, 2.0, -1.5, 3.0, 0.25))
            return ScalarOp(op, self.expr(shape, sub), value)
        if rule == "binary":
            if nd and rng.random() < 0.3:
                other: tuple[int, ...] = shape[rng.randrange(nd) :]  # fewer leading dims
            else:
                other = tuple(1 if rng.random() < 0.4 else n for n in shape)
            return Binary(rng.choice(BINARY_OPS), self.expr(shape, sub), self.expr(other, sub))
        if rule == "normalize":
            op = rng.choice(REDUCTIONS)
            dims = [d for d in range(nd) if op not in SPREAD_REDUCTIONS or shape[d] >= 2]
            dim: Optional[int] = rng.choice(dims) if dims and rng.random() < 0.7 else None
            if op in SPREAD_REDUCTIONS and dim is None and math.prod(shape) < 2:
                op = "mean"
            return Normalize(op, self.expr(shape, sub), dim, rng.random() < 0.5)
        if rule == "cast":
            return Cast(self.expr(shape, sub), rng.choice(HALF_DTYPES))
        if rule == "item":
            return ItemScale(
                self.expr(shape, sub), self.scalar_source(), rng.choice(("mul", "mul", "add"))
            )
        if rule == "chain":
            return Chain(self.expr(shape, sub), rng.randint(2, 40))
        if rule == "reshape":
            n = math.prod(shape)
            options = {(n,), tuple(reversed(shape))}
            if nd >= 2:
                options.add((shape[0], n // shape[0]))
                options.add((n // shape[-1], shape[-1]))
            options.discard(shape)
            inner: Union[tuple[int, ...], list[int]]  # the branches below rebind it to a list
            inner = rng.choice(sorted(options)) if options else (n,)
            return Reshape(self.expr(inner, sub), shape, view=rng.random() < 0.3)
        if rule == "permute":
            dims = list(range(nd))
            rng.shuffle(dims)
            inner = [0] * nd
            for i, d in enumerate(dims):
                inner[d] = shape[i]
            return Permute(self.expr(tuple(inner), sub), tuple(dims))
        if rule == "transpose":
            if nd == 2 and rng.random() < 0.5:
                return Transpose(self.expr((shape[1], shape[0]), sub), -1, -1)
            a, b = rng.sample(range(nd), 2)
            inner = list(shape)
            inner[a], inner[b] = inner[b], inner[a]
            return Transpose(self.expr(tuple(inner), sub), a, b)
        if rule == "flip":
            k = rng.randint(1, nd)
            return Flip(self.expr(shape, sub), tuple(sorted(rng.sample(range(nd), k))))
        if rule == "narrow":
            d = rng.randrange(nd)
            how = rng.choice(NARROW_HOWS)
            inner = list(shape)
            if how == "step":
                start = rng.randint(0, 1)
                inner[d] = 2 * shape[d] - 1 + start
            else:
                extra = rng.randint(1, 3)
                start = rng.randint(0, extra)
                inner[d] = shape[d] + extra
            return Narrow(how, self.expr(tuple(inner), sub), d, start, shape[d])
        if rule == "piece":
            d = rng.randrange(nd + 1) if rng.random() < 0.3 else rng.randrange(nd)
            how = rng.choice(PIECE_HOWS)
            pieces = rng.randint(2, 3)
            index = rng.randrange(pieces)
            if how == "unbind":
                inner = shape[:d] + (pieces,) + shape[d:]
                return Piece(how, self.expr(inner, sub), d, pieces, index)
            d = min(d, nd - 1)
            inner = shape[:d] + (shape[d] * pieces,) + shape[d + 1 :]
            return Piece(how, self.expr(inner, sub), d, pieces, index)
        if rule == "cat":
            d = rng.choice([i for i, n in enumerate(shape) if n >= 2])
            cut = rng.randint(1, shape[d] - 1)
            parts = []
            for size in (cut, shape[d] - cut):
                part = shape[:d] + (size,) + shape[d + 1 :]
                parts.append(self.expr(part, sub))
            return Cat(tuple(parts), d)
        if rule == "stack":
            d = rng.choice([i for i, n in enumerate(shape) if n <= 4])
            part = shape[:d] + shape[d + 1 :]
            return Stack(tuple(self.expr(part, sub) for _ in range(shape[d])), d)
        # lowrank
        rows = shape[0]
        cols = math.prod(shape) // rows
        rank = rng.choice((1, 2, 4, max(1, min(rows, cols))))
        return LowRank(self.expr((rows, rank), sub), self.expr((rank, cols), sub), shape)

    def arg(self, shape: tuple[int, ...], *, plain: float = 0.25) -> Expr:
        """A weight or bias: a stored tensor now and then, else a computation."""
        if self.rng.random() < plain:
            return self.source(shape)
        return self.expr(shape, self.rng.randint(1, self.options.max_depth))
