"""The documented fold rule applied to a description alone (`expected_gemms`): which
GEMMs must fold, which the rule declines and why, and how many bytes a fold may add."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Final, Optional

from tests.support.grammar._constants import EXPECT_FOLD_MAX_NODES, FOLDED_ITEMSIZE, SPECTRAL
from tests.support.grammar._description import (
    Binary,
    Chain,
    Expr,
    Gemm,
    ItemScale,
    LowRank,
    Normalize,
    Piece,
    Program,
    Source,
    Src,
    Unary,
)
from tests.support.grammar._evaluate import expr_shape
from tests.support.grammar._walk import expr_uses_cast, program_exprs, sources_of, walk_exprs

# Nodes a parametrization adds to each read (weight_norm: pow/sum/sqrt/div/mul and views;
# spectral_norm: mv/vdot/div and views): an overestimate is harmless, it only makes the
# expectation more cautious.
_PARAM_NODES: Final = {
    "none": 0,
    "weight_norm": 8,
    "weight_norm_none": 8,
    "spectral_norm": 12,
    "legacy_weight_norm": 8,
    "legacy_spectral_norm": 12,
}


def estimate_nodes(expr: Expr, sources: dict[str, Source]) -> int:
    """An upper estimate of the ATen nodes ``expr`` exports to."""
    total = 0
    for node in walk_exprs(expr):
        if isinstance(node, Src):
            src = sources[node.name]
            total += 1 + _PARAM_NODES[src.param] + (src.dtype != "float32")
        elif isinstance(node, Chain):
            total += 2 * node.steps
        elif isinstance(node, Normalize):
            total += 5
        elif isinstance(node, (Unary, Binary, Piece, LowRank, ItemScale)):
            total += 3
        else:
            total += 2
    return total


def source_numel(src: Source) -> int:
    """Elements stored for ``src``, parametrization tensors included."""
    n = math.prod(src.shape)
    if src.param in ("weight_norm", "legacy_weight_norm"):
        return n + src.shape[0]
    if src.param == "weight_norm_none":
        return n + 1
    if src.param in SPECTRAL:
        return n + src.shape[0] + n // src.shape[0]
    return n


@dataclass(frozen=True)
class Expectation:
    """What the documented rule says about one GEMM.

    Attributes:
        method, layer: where the GEMM is.
        foldable: True when the weight and bias are each absent, a stored tensor, or a
            computation the rule folds; False when the rule declines one; None when the
            grammar cannot tell (a computation near the node budget).
        computed: roles whose value is computed (these must be folded when foldable).
        cast: a computed role rounds through or reads half/bfloat16.
        widened: bytes a fold may add over stock by widening a half/bfloat16 source to
            the float32 a hand-folded model stores (docs/how-it-works.md, "Design
            choices").
        why: the reason when not foldable.
    """

    method: str
    layer: int
    foldable: Optional[bool]
    computed: tuple[str, ...]
    cast: bool
    widened: int
    why: str = ""


def _is_plain(expr: Expr, layer: Gemm, sources: dict[str, Source], role: str) -> bool:
    """A stored tensor used as it is: nothing to compute."""
    if not isinstance(expr, Src):
        return False
    src = sources[expr.name]
    if src.param != "none" or src.dtype != "float32":
        return False
    # `x @ W.t()`: the transpose is a computation of W
    return not (role == "weight" and layer.kind == "matmul_t")


def _added_bias(layer: Gemm, role: str) -> bool:
    """The bias of ``mm``/``matmul`` is ``y + b``: an add, a non-GEMM use of its sources."""
    return role == "bias" and layer.kind in ("mm", "matmul", "matmul_t")


def expected_gemms(program: Program) -> list[Expectation]:
    """Apply the documented fold rule (docs/how-it-works.md, "The pipeline" 2) to every
    GEMM of ``program``.

    A computed weight or bias folds when (1) it is a pure computation of parameters,
    unmutated buffers and constants (always so in this grammar), (2) no source of its
    sharing component (sources connected through GEMM weight computations, in any method)
    is read by a non-GEMM op (a side use, an embedding lookup), (3) the distinct folded
    tensors of the component take no more bytes than the sources they free (sources at
    float32 size; a source also used as a stored weight frees nothing), and (4) it has at
    most the node budget (here: at most half of it by estimate, else "unknown").
    """
    sources = {s.name: s for s in program.sources}
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(names: frozenset[str]) -> None:
        first, *rest = sorted(names)
        for other in rest:
            parent[find(other)] = find(first)

    layers = {(m.name, i): layer for m in program.methods for i, layer in enumerate(m.layers)}
    tainted: set[str] = set()
    kept: set[str] = set()
    args: list[tuple[str, int, str, Expr]] = []
    for method, index, role, e in program_exprs(program):
        names = sources_of(e)
        union(names)
        if index is None or _added_bias(layers[(method, index)], role):
            tainted |= names
            continue
        layer = layers[(method, index)]
        if _argument_problem(layer) or (layer.kind == "addmm" and layer.bias_shape in ("M1", "MN")):
            # A GEMM that stays on portable (or may) keeps what it reads, like a
            # non-GEMM use (docs/how-it-works.md, "Trust").
            tainted |= names
            continue
        if _is_plain(e, layer, sources, role):
            kept |= names
        args.append((method, index, role, e))
    # Distinct folded tensors per component: equal expressions (same ops on the same
    # sources, the same rescaling) fold to the same bytes, stored once.
    folded: dict[str, dict[tuple[Expr, str], int]] = {}
    for method, index, role, e in args:
        layer = layers[(method, index)]
        if _is_plain(e, layer, sources, role):
            continue
        root = find(next(iter(sources_of(e))))
        shape = expr_shape(e, sources)
        folded.setdefault(root, {})[(e, role)] = math.prod(shape) * FOLDED_ITEMSIZE
    freed: dict[str, int] = {}
    for name in {n for _, _, _, e in args for n in sources_of(e)}:
        if name not in kept:
            freed[find(name)] = (
                freed.get(find(name), 0) + source_numel(sources[name]) * FOLDED_ITEMSIZE
            )

    # How many expressions (weights, biases, side uses, tables) read each source.
    readers: dict[str, int] = {}
    for _, _, _, e in program_exprs(program):
        for name in sources_of(e):
            readers[name] = readers.get(name, 0) + 1
    # A GEMM that does not fold a computed role (it stays on portable, or takes a
    # fully-connected weight at run time) reads all its arguments outside any fold, like
    # a non-GEMM use, as the partitioner counts it: repeat until no GEMM changes.
    while True:
        tainted_roots = {find(n) for n in tainted}
        result, keeping = _verdicts(program, sources, tainted_roots, folded, freed, readers, find)
        grown = tainted | {
            n
            for layer in keeping
            for e in (layer.weight, layer.bias)
            if e is not None
            for n in sources_of(e)
        }
        if grown == tainted:
            return result
        tainted = grown


def _verdicts(
    program: Program,
    sources: dict[str, Source],
    tainted_roots: set[str],
    folded: dict[str, dict[tuple[Expr, str], int]],
    freed: dict[str, int],
    readers: dict[str, int],
    find: Callable[[str], str],
) -> tuple[list[Expectation], list[Gemm]]:
    """One application of the rule, and the GEMMs that do not fold a computed role."""
    result = []
    keeping: list[Gemm] = []
    for method in program.methods:
        for i, layer in enumerate(method.layers):
            computed: list[str] = []
            declined: list[str] = []
            foldable: Optional[bool] = True
            why = ""
            cast = False
            widened = 0
            for role, e in (("weight", layer.weight), ("bias", layer.bias)):
                if e is None or _is_plain(e, layer, sources, role) or _added_bias(layer, role):
                    continue
                computed.append(role)
                cast = cast or expr_uses_cast(e, sources)
                shape = expr_shape(e, sources)
                if any(sources[n].dtype != "float32" for n in sources_of(e)):
                    widened += math.prod(shape) * FOLDED_ITEMSIZE
                root = find(next(iter(sources_of(e))))
                if root in tainted_roots:
                    foldable, why = False, f"{role}: a source is also read by a non-GEMM op"
                    declined.append(role)
                elif sum(folded[root].values()) > freed.get(root, 0):
                    foldable = False
                    why = (
                        f"{role}: folding grows ({sum(folded[root].values())} bytes folded, "
                        f"{freed.get(root, 0)} freed)"
                    )
                    declined.append(role)
                elif foldable and estimate_nodes(e, sources) > EXPECT_FOLD_MAX_NODES:
                    foldable, why = None, f"{role}: near the node budget"
            if declined:
                keeping.append(layer)
            if _argument_problem(layer):
                foldable, why = False, _argument_problem(layer)
            elif (
                layer.kind in ("conv1d", "conv_transpose1d")
                and _is_plain(layer.weight, layer, sources, "weight")
                and readers[layer.weight.name] > 1  # type: ignore[union-attr]
            ):
                # XNNPACK reshapes a 1D kernel in place: a kernel with another reader
                # stays on portable (docs/how-it-works.md, "Trust").
                foldable, why = False, "argument: a shared 1D kernel"
                if computed:
                    keeping.append(layer)
            elif (
                layer.kind in ("conv2d", "conv_transpose2d")
                and _is_plain(layer.weight, layer, sources, "weight")
                and readers[layer.weight.name] > 1  # type: ignore[union-attr]
            ):
                # A 2D kernel another reader shares stays on portable when that reader
                # is not a convolution (docs/how-it-works.md, "Trust"); the readers are not
                # told apart.
                foldable, why = None, "argument: a shared 2D kernel"
            elif layer.kind == "addmm" and layer.bias_shape in ("M1", "MN"):
                # Per output channel only when the activation has one row.
                foldable, why = None, "argument: addmm bias per row"
            result.append(
                Expectation(method.name, i, foldable, tuple(computed), cast, widened, why)
            )
    return result, keeping


def _argument_problem(layer: Gemm) -> str:
    """What XNNPACK cannot compute whatever the weight (docs/how-it-works.md, "Trust"): a
    scalar addmm bias (not one value per output channel), a deconvolution whose
    output_padding is not below its stride. Such a GEMM stays on portable."""
    if layer.kind == "addmm" and layer.bias_shape == "scalar":
        return "argument: a scalar addmm bias is not per output channel"
    if layer.kind.startswith("conv_transpose") and layer.output_padding >= layer.stride:
        return "argument: output_padding not below stride"
    return ""
