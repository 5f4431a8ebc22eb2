"""Evaluating an expression with plain ATen ops (what the built modules' ``forward``
runs, so ``torch.export`` records exactly that computation), its shape on meta tensors,
and a short rendering for failure messages."""

from __future__ import annotations

from typing import Callable, cast, Optional

import torch

from tests.support.grammar._constants import (
    DIV_OFFSET,
    EXP_CLAMP,
    NORM_EPS,
    SPREAD_REDUCTIONS,
    SQRT_EPS,
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


def _reduce_shape(shape: tuple[int, ...], dim: Optional[int], keepdim: bool) -> tuple[int, ...]:
    if dim is None:
        return ()
    return (
        tuple(1 if i == dim else n for i, n in enumerate(shape))
        if keepdim
        else tuple(n for i, n in enumerate(shape) if i != dim)
    )


def expr_shape(expr: Expr, sources: dict[str, Source]) -> tuple[int, ...]:
    """The shape ``expr`` evaluates to (evaluated on meta tensors)."""
    env = _Env({name: _MetaLeaf(src.shape) for name, src in sources.items()}, meta=True)
    return tuple(env.eval(expr).shape)


# --------------------------------------------------------------------------------------
# Evaluation (used by the built modules' forward and for shapes).


class _MetaLeaf:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __call__(self) -> torch.Tensor:
        return torch.empty(self.shape, device="meta")


class _Env:
    """Evaluates expressions; ``leaves[name]()`` reads a source."""

    def __init__(
        self, leaves: dict[str, Callable[[], torch.Tensor]], *, meta: bool = False
    ) -> None:
        self.leaves = leaves
        self.meta = meta

    def leaf(self, name: str) -> torch.Tensor:
        value = self.leaves[name]()
        return value if value.dtype == torch.float32 else value.float()

    def eval(self, expr: Expr) -> torch.Tensor:
        if isinstance(expr, Chain):
            # Iterative so that a few thousand steps never recurse.
            w = self.eval(expr.x)
            for _ in range(expr.steps):
                w = w * 1.0001 + 0.0001
            return w
        return self._eval(expr)

    def _eval(self, e: Expr) -> torch.Tensor:
        if isinstance(e, Src):
            return self.leaf(e.name)
        if isinstance(e, Unary):
            x = self.eval(e.x)
            return {
                "neg": lambda: torch.neg(x),
                "abs": lambda: torch.abs(x),
                "exp": lambda: torch.exp(x.clamp(-EXP_CLAMP, EXP_CLAMP)),
                "tanh": lambda: torch.tanh(x),
                "sigmoid": lambda: torch.sigmoid(x),
                "sqrt": lambda: torch.sqrt(x.abs() + SQRT_EPS),
                "reciprocal": lambda: torch.reciprocal(x.abs() + DIV_OFFSET),
                "sin": lambda: torch.sin(x),
                "clamp": lambda: torch.clamp(x, -1.0, 1.0),
            }[e.op]()
        if isinstance(e, ScalarOp):
            x = self.eval(e.x)
            if e.op == "add":
                return x + e.value
            if e.op == "sub":
                return x - e.value
            if e.op == "mul":
                return x * e.value
            if e.op == "div":
                return x / e.value
            return e.value - x
        if isinstance(e, Binary):
            x, y = self.eval(e.x), self.eval(e.y)
            if e.op == "add":
                return x + y
            if e.op == "sub":
                return x - y
            if e.op == "mul":
                return x * y
            if e.op == "div":
                return x / (y.abs() + DIV_OFFSET)
            return torch.maximum(x, y)
        if isinstance(e, Normalize):
            x = self.eval(e.x)
            return x / (_reduction(x, e.op, e.dim, e.keepdim) + NORM_EPS)
        if isinstance(e, Reshape):
            x = self.eval(e.x)
            return x.view(e.shape) if e.view else x.reshape(e.shape)
        if isinstance(e, Permute):
            return self.eval(e.x).permute(e.dims)
        if isinstance(e, Transpose):
            x = self.eval(e.x)
            return x.t() if e.dim0 == e.dim1 == -1 else x.transpose(e.dim0, e.dim1)
        if isinstance(e, Flip):
            return torch.flip(self.eval(e.x), e.dims)
        if isinstance(e, Narrow):
            x = self.eval(e.x)
            if e.how == "narrow":
                return x.narrow(e.dim, e.start, e.length)
            index: list[slice] = [slice(None)] * x.dim()
            if e.how == "slice":
                index[e.dim] = slice(e.start, e.start + e.length)
            else:
                index[e.dim] = slice(e.start, None, 2)
            return x[tuple(index)]
        if isinstance(e, Cat):
            return torch.cat([self.eval(p) for p in e.parts], e.dim)
        if isinstance(e, Stack):
            return torch.stack([self.eval(p) for p in e.parts], e.dim)
        if isinstance(e, Piece):
            x = self.eval(e.x)
            if e.how == "unbind":
                return x.unbind(e.dim)[e.index]
            if e.how == "chunk":
                return x.chunk(e.pieces, e.dim)[e.index]
            size = x.shape[e.dim] // e.pieces
            if e.how == "split":
                return x.split(size, e.dim)[e.index]
            return x.split([size] * e.pieces, e.dim)[e.index]
        if isinstance(e, Cast):
            x = self.eval(e.x)
            return x.to(getattr(torch, e.dtype)).float()
        if isinstance(e, LowRank):
            return (self.eval(e.a) @ self.eval(e.b)).reshape(e.shape)
        if isinstance(e, ItemScale):
            x = self.eval(e.x)
            # On meta tensors there is no value to read; the shape is x's.
            s = 1.0 if self.meta else self.leaf(e.scalar).item()
            return x * s if e.op == "mul" else x + s
        raise TypeError(f"not an expression: {e!r}")


def _reduction(x: torch.Tensor, op: str, dim: Optional[int], keepdim: bool) -> torch.Tensor:
    """A positive reduction of ``x`` broadcastable back to ``x``."""
    if op in SPREAD_REDUCTIONS:
        r = x.var(dim=dim, keepdim=keepdim) if op == "var" else x.std(dim=dim, keepdim=keepdim)
    else:
        a = x.abs()
        if op == "norm":
            r = a.norm(dim=dim, keepdim=keepdim) if dim is not None else a.norm()
        elif dim is None:
            r = cast(
                Callable[[], torch.Tensor],
                {
                    "sum": a.sum,
                    "mean": a.mean,
                    "amax": a.amax,
                    "amin": a.amin,
                    "max": a.max,
                    "min": a.min,
                }[op],
            )()
        elif op in ("max", "min"):
            r = (a.max if op == "max" else a.min)(dim, keepdim).values
        else:
            r = getattr(a, op)(dim=dim, keepdim=keepdim)
    if dim is not None and not keepdim:
        r = r.unsqueeze(dim)
    return r


def render_expr(expr: Expr) -> str:
    """The expression as readable torch code (sources by name)."""

    def r(e: Expr) -> str:
        if isinstance(e, Src):
            return e.name
        if isinstance(e, Unary):
            return f"{e.op}({r(e.x)})"
        if isinstance(e, ScalarOp):
            sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(e.op)
            return f"({r(e.x)} {sym} {e.value})" if sym else f"({e.value} - {r(e.x)})"
        if isinstance(e, Binary):
            sym = {"add": "+", "sub": "-", "mul": "*"}.get(e.op)
            if sym:
                return f"({r(e.x)} {sym} {r(e.y)})"
            if e.op == "div":
                return f"({r(e.x)} / (|{r(e.y)}| + {DIV_OFFSET}))"
            return f"maximum({r(e.x)}, {r(e.y)})"
        if isinstance(e, Normalize):
            return f"({r(e.x)} / ({e.op}(.., dim={e.dim}, keepdim={e.keepdim}) + eps))"
        if isinstance(e, Reshape):
            return f"{r(e.x)}.{'view' if e.view else 'reshape'}{e.shape}"
        if isinstance(e, Permute):
            return f"{r(e.x)}.permute{e.dims}"
        if isinstance(e, Transpose):
            return f"{r(e.x)}.t()" if e.dim0 == -1 else f"{r(e.x)}.transpose({e.dim0}, {e.dim1})"
        if isinstance(e, Flip):
            return f"{r(e.x)}.flip{e.dims}"
        if isinstance(e, Narrow):
            return f"{r(e.x)}.{e.how}(dim={e.dim}, start={e.start}, len={e.length})"
        if isinstance(e, (Cat, Stack)):
            name = "cat" if isinstance(e, Cat) else "stack"
            return f"{name}([{', '.join(r(p) for p in e.parts)}], {e.dim})"
        if isinstance(e, Piece):
            return f"{r(e.x)}.{e.how}({e.pieces}, dim={e.dim})[{e.index}]"
        if isinstance(e, Cast):
            return f"{r(e.x)}.to({e.dtype}).float()"
        if isinstance(e, LowRank):
            return f"({r(e.a)} @ {r(e.b)}).reshape{e.shape}"
        if isinstance(e, ItemScale):
            return f"({r(e.x)} {'*' if e.op == 'mul' else '+'} {e.scalar}.item())"
        if isinstance(e, Chain):
            return f"chain{e.steps}({r(e.x)})"
        return repr(e)

    return r(expr)
