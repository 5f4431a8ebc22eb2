"""A program description: plain frozen dataclasses, so ``repr(program)`` is a pasteable
reproducer. A weight or bias is an expression tree (`Expr`) over named sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(frozen=True)
class Src:
    """A named source (`Source`); half/bfloat16 sources are read as ``.float()``."""

    name: str


@dataclass(frozen=True)
class Unary:
    op: str
    x: Expr


@dataclass(frozen=True)
class ScalarOp:
    """``x op value`` with a python scalar (``rsub``: ``value - x``; ``div`` by ``value``)."""

    op: str
    x: Expr
    value: float


@dataclass(frozen=True)
class Binary:
    """``x op y`` with ``y`` broadcast to ``x`` (``div``: by ``|y| + 0.5``)."""

    op: str
    x: Expr
    y: Expr


@dataclass(frozen=True)
class Normalize:
    """``x / (reduction(x) + eps)``: ``dim=None`` reduces everything; without keepdim the
    reduction is unsqueezed back before dividing."""

    op: str
    x: Expr
    dim: Optional[int]
    keepdim: bool


@dataclass(frozen=True)
class Reshape:
    """``x.reshape(shape)`` (or ``.view`` when ``view``)."""

    x: Expr
    shape: tuple[int, ...]
    view: bool = False


@dataclass(frozen=True)
class Permute:
    x: Expr
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Transpose:
    """``x.transpose(dim0, dim1)``; ``x.t()`` when both are -1."""

    x: Expr
    dim0: int
    dim1: int


@dataclass(frozen=True)
class Flip:
    x: Expr
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Narrow:
    """``x.narrow(dim, start, length)``, the same as a slice, or ``[start::2]``."""

    how: str
    x: Expr
    dim: int
    start: int
    length: int


@dataclass(frozen=True)
class Cat:
    parts: tuple[Expr, ...]
    dim: int


@dataclass(frozen=True)
class Stack:
    parts: tuple[Expr, ...]
    dim: int


@dataclass(frozen=True)
class Piece:
    """Piece ``index`` of ``split``/``split_sizes``/``chunk``/``unbind`` of ``x`` along
    ``dim`` into ``pieces`` equal parts."""

    how: str
    x: Expr
    dim: int
    pieces: int
    index: int


@dataclass(frozen=True)
class Cast:
    """``x.to(dtype).float()``: a round trip through half or bfloat16."""

    x: Expr
    dtype: str


@dataclass(frozen=True)
class LowRank:
    """``(a @ b).reshape(shape)``."""

    a: Expr
    b: Expr
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ItemScale:
    """``x * s.item()`` (or ``x + s.item()``) for a 0-d source ``s``."""

    x: Expr
    scalar: str
    op: str = "mul"


@dataclass(frozen=True)
class Chain:
    """``steps`` times ``w = w * 1.0001 + 0.0001``: a long computation of one weight."""

    x: Expr
    steps: int


Expr = Union[
    Src,
    Unary,
    ScalarOp,
    Binary,
    Normalize,
    Reshape,
    Permute,
    Transpose,
    Flip,
    Narrow,
    Cat,
    Stack,
    Piece,
    Cast,
    LowRank,
    ItemScale,
    Chain,
]

# --------------------------------------------------------------------------------------
# The description: sources, GEMMs, methods, programs.


@dataclass(frozen=True)
class Source:
    """A tensor the program stores.

    Attributes:
        name: identifier (also the holder module's name).
        shape: shape of the tensor a read yields.
        kind: ``param``, ``buffer`` (never written) or ``const`` (a plain tensor
            attribute, which export lifts as a constant).
        dtype: ``float32``, ``float16`` or ``bfloat16`` (stored so; read as float32).
        param: a `PARAMETRIZATIONS` entry (float32 parameters only).
    """

    name: str
    shape: tuple[int, ...]
    kind: str = "param"
    dtype: str = "float32"
    param: str = "none"


@dataclass(frozen=True)
class Gemm:
    """One GEMM on the canonical (B, C, *spatial) activation.

    Attributes:
        kind: a `GEMM_KINDS` entry.
        in_ch, out_ch: channels (features for the fully-connected kinds).
        weight: the weight in the op's own layout (conv: (out, in/g, *k); transposed conv:
            (in, out/g, *k); linear, matmul_t: (N, K); addmm, mm, matmul: (K, N)).
        bias: the bias (None: no bias; addmm always has one, of ``bias_shape``).
        kernel, stride, padding, dilation, groups, output_padding: convolution geometry.
        act: rank of the fully-connected activation: 1 (``(K,)``), 2 (``(M, K)``) or 3
            (``(B, L, K)``, contiguous).
        alpha, beta: ``torch.addmm`` scalars.
        bias_shape: ``torch.addmm`` bias shape (`ADDMM_BIAS_SHAPES`).
        module: the layer calls an ``nn.ConvNd``/``nn.Linear`` holding the weight source
            (and the bias source) itself, parametrized as the source says.
    """

    kind: str
    in_ch: int
    out_ch: int
    weight: Expr
    bias: Optional[Expr] = None
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1
    output_padding: int = 0
    act: int = 2
    alpha: float = 1.0
    beta: float = 1.0
    bias_shape: str = "N"
    module: bool = False


@dataclass(frozen=True)
class Method:
    """One method of the program.

    ``kind="chain"``: the GEMMs in sequence on a (batch, in_ch, *spatial) input, tanh in
    between; each expression of ``side`` is also read by a non-GEMM op whose output is
    added to the result (``y + tanh(e).mean()``). ``kind="embed"``: an embedding lookup
    ``F.embedding(idx, table)`` of ``(batch, length)`` indices, ``length = spatial[0]``.
    """

    name: str
    kind: str
    in_ch: int
    spatial: tuple[int, ...]
    batch: int
    layers: tuple[Gemm, ...] = ()
    side: tuple[Expr, ...] = ()
    table: Optional[Expr] = None
    dynamic: bool = False


@dataclass(frozen=True)
class Program:
    """A seeded program: its sources and its methods (lowered together)."""

    seed: int
    scenario: str
    sources: tuple[Source, ...]
    methods: tuple[Method, ...]


class DegenerateProgram(ValueError):
    """The description builds, but its values are not finite (the generator redraws)."""
