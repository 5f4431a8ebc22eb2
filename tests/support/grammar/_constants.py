"""The grammar's constants (op names, GEMM kinds, extents, tolerances of the values it
draws) and the generator's knobs (`GenOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CONV_KINDS: Final = ("conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d")
# x @ W with W (K, N); x @ W.t() with W (N, K); torch.mm(x, W) and addmm take W (K, N).
FC_KINDS: Final = ("linear", "addmm", "mm", "matmul", "matmul_t")
GEMM_KINDS: Final = CONV_KINDS + FC_KINDS
# Kinds whose activation may be 1-D, 2-D or batched 3-D (addmm and mm need 2-D).
ANY_RANK_KINDS: Final = ("linear", "matmul", "matmul_t")
ADDMM_SCALARS: Final = (1.0, 0.5, 2.0, -1.5, 0.0)
ADDMM_BIAS_SHAPES: Final = ("N", "1N", "scalar", "M1", "MN")
# Bias shapes that name the activation's row count M: impossible with a dynamic batch.
ROW_BIAS_SHAPES: Final = ("M1", "MN")

UNARY_OPS: Final = ("neg", "abs", "exp", "tanh", "sigmoid", "sqrt", "reciprocal", "sin", "clamp")
SCALAR_OPS: Final = ("add", "sub", "mul", "div", "rsub")
BINARY_OPS: Final = ("add", "sub", "mul", "div", "maximum")
REDUCTIONS: Final = ("sum", "mean", "amax", "amin", "max", "min", "norm", "var", "std")
# Reductions that need two elements (Bessel's correction divides by n - 1).
SPREAD_REDUCTIONS: Final = ("var", "std")
PARAMETRIZATIONS: Final = (
    "none",
    "weight_norm",
    "weight_norm_none",
    "spectral_norm",
    "legacy_weight_norm",
    "legacy_spectral_norm",
)
SPECTRAL: Final = ("spectral_norm", "legacy_spectral_norm")
LEGACY: Final = ("legacy_weight_norm", "legacy_spectral_norm")
SOURCE_KINDS: Final = ("param", "buffer", "const")
HALF_DTYPES: Final = ("float16", "bfloat16")
PIECE_HOWS: Final = ("split", "split_sizes", "chunk", "unbind")
NARROW_HOWS: Final = ("narrow", "slice", "step")

MAX_CHANNELS: Final = 32
MAX_EXTENT: Final = 16
# Sources shared in the sharing scenarios hold at least this many float32 elements
# (4 KiB): storing one twice must be visible in bytes above the per-GEMM allowance.
SHARED_MIN_NUMEL: Final = 1024
# docs/how-it-works.md, "The pipeline" 2: a computation of at most max_fold_nodes (default
# 65,536) nodes.
# The grammar estimates nodes from the description, and edge decompositions multiply
# them by a small factor, so a GEMM is only *expected* to fold under half the budget.
DOCUMENTED_MAX_FOLD_NODES: Final = 65536
EXPECT_FOLD_MAX_NODES: Final = DOCUMENTED_MAX_FOLD_NODES // 2
# Folded tensors are float32: docs/how-it-works.md ("Design choices") measures float sources
# at the folded size.
FOLDED_ITEMSIZE: Final = 4
# Divisors are offset away from zero so every generated value stays finite.
DIV_OFFSET: Final = 0.5
NORM_EPS: Final = 1e-2
SQRT_EPS: Final = 1e-3
EXP_CLAMP: Final = 4.0
# A composite weight is rescaled to this standard deviation times 1/sqrt(fan_in), so
# outputs stay O(1) whatever the expression does to magnitudes.
WEIGHT_GAIN: Final = 1.0
BIAS_STD: Final = 0.1
SOURCE_STD: Final = 0.5
DYNAMIC_MAX_BATCH: Final = 8


@dataclass(frozen=True)
class GenOptions:
    """Knobs of the generator.

    Attributes:
        max_layers: GEMMs per chain method.
        max_depth: depth of a weight expression.
        max_chain_steps: longest `Chain` of the long-chain scenario (2 nodes a step).
        min_long_chain_steps: shortest one.
        scenarios: (scenario, weight) pairs to draw from.
    """

    max_layers: int = 3
    max_depth: int = 3
    max_chain_steps: int = 1500
    min_long_chain_steps: int = 300
    scenarios: tuple[tuple[str, float], ...] = (
        ("chain", 0.55),
        ("addmm", 0.12),
        ("pool", 0.1),
        ("multi", 0.08),
        ("tied", 0.08),
        ("long_chain", 0.04),
        ("item", 0.03),
    )
