"""Every reason code, from the unit that gives it, on two tiny programs.

For each code in `xnnfold.passes._reason_codes.CODES`, one entry of `CASES`: a negative program
whose GEMM the rule declines with exactly that code, and a positive one, minimally
different, that every rule lets through. A code without an entry fails
`test_every_code_has_a_case`. No runtime and no ``to_executorch``: the end-to-end tier
runs the programs; this tier pins each rule's boundary, in seconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.fx import Node
from torch.nn import functional as F

from xnnfold._meta import CUSTOM_META_KEY, VAL_META_KEY
from xnnfold.passes._options import FoldOptions, GrowthBudget
from xnnfold.passes._reason_codes import CODES
from xnnfold.passes.analysis import new_analysis_cache, Rejection, WeightComputation

from tests.passes.analysis._harness import (
    ACCEPTED,
    ARGUMENT_RULES,
    Judge,
    PARTITIONER,
    PREDICATE,
    Probe,
    Programs,
    run_predicate,
    WRITTEN_ELSEWHERE,
)

# --------------------------------------------------------------------------------------
# The tiny modules. Each computes its judged GEMM's weight in one way; the rules see
# nothing else of it.


class _Scaled(nn.Module):
    """``linear(x, w * scale)``: the scale a buffer (a constant) or, with
    ``scale_from_input``, a value computed from the input."""

    g: torch.Tensor

    def __init__(self, *, scale_from_input: bool = False, other_reader: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("g", torch.full((4, 1), 0.5))
        self.scale_from_input = scale_from_input
        self.other_reader = other_reader

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.mean() if self.scale_from_input else self.g
        y = F.linear(x, self.w * scale)
        # The source also read outside the weight computation.
        return y + self.w.sum() if self.other_reader else y


class _Chain(nn.Module):
    """``linear(x, w.abs().neg())``: a computation of three nodes (w, abs, neg)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w.abs().neg())


class _ManyGemms(nn.Module):
    """``gemms`` linears, each on its own ``w.neg()``: one source shared by ``gemms``
    weight computations (a component of 1 + ``gemms`` nodes)."""

    def __init__(self, gemms: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.gemms = gemms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(F.linear(x, self.w.neg()) for _ in range(self.gemms))  # type: ignore[return-value]


class _SharedWithOther(nn.Module):
    """``linear(x, w * 2) + linear(x, w * v)``: the second weight computation shares the
    source ``w`` with the first; with ``v_read_elsewhere`` its other source ``v`` also
    feeds the output, so that computation stays in the program."""

    def __init__(self, *, v_read_elsewhere: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.v = nn.Parameter(torch.randn(4, 4))
        self.v_read_elsewhere = v_read_elsewhere

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.w * 2.0) + F.linear(x, self.w * self.v)
        return y + self.v.sum() if self.v_read_elsewhere else y


class _LowRank(nn.Module):
    """``linear(x, a @ b)`` with ``a`` 4 x rank and ``b`` rank x 4: the folded 4 x 4
    weight takes 16 values, its sources 8 * rank. (``a @ b`` is a GEMM too: the linear
    is the last one.)"""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, rank))
        self.b = nn.Parameter(torch.randn(rank, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.a @ self.b)


class _BufferWeight(nn.Module):
    """``linear(x, w)`` with ``w`` a buffer; with ``written``, the program then adds 1."""

    w: torch.Tensor

    def __init__(self, *, written: bool) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(4, 4))
        self.written = written

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.w)
        if self.written:
            self.w.add_(1.0)
        return y


class _Addmm(nn.Module):
    """``addmm(bias, x, w, beta=beta)``: the bias a parameter of ``bias_shape``, or, with
    ``bias_from_input``, the program's second input."""

    def __init__(
        self,
        *,
        beta: float = 1.0,
        bias_shape: tuple[int, ...] = (4,),
        bias_from_input: bool = False,
    ) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(bias_shape))
        self.beta = beta
        self.bias_from_input = bias_from_input

    def forward(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.addmm(b if self.bias_from_input else self.b, x, self.w, beta=self.beta)


class _ConvTranspose(nn.Module):
    """A transposed 2D convolution with ``output_padding`` 1 and dilation 2."""

    def __init__(self, *, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(2, 2, 3, stride=stride, dilation=2, output_padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _Conv1d(nn.Module):
    """``conv1d(x, w)``; with ``kernel_read_elsewhere``, plus ``w.sum()``."""

    def __init__(self, *, kernel_read_elsewhere: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 2, 3))
        self.kernel_read_elsewhere = kernel_read_elsewhere

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv1d(x, self.w)
        return y + self.w.sum() if self.kernel_read_elsewhere else y


class _PermutedInput(nn.Module):
    """``mm(x, y.permute(dims))``: a weight computed at run time as a permute."""

    def __init__(self, dims: tuple[int, int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, y.permute(self.dims))


class _ExpandedKernel(nn.Module):
    """A depthwise ``conv1d`` whose 3-tap kernel is ``expand()``ed to 4 channels: the
    folded weight takes 48 bytes, the kernel 12, so the fold adds 36."""

    def __init__(self) -> None:
        super().__init__()
        self.k = nn.Parameter(torch.randn(1, 1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.k.expand(4, 1, 3), groups=4)


class _Linear(nn.Linear):
    def __init__(self) -> None:
        super().__init__(4, 4)


class _TiedTable(nn.Module):
    """A linear's weight also read outside any delegate (a cumulative sum, which XNNPACK
    has no kernel for): a tied table; with ``also_scaled``, the linear's delegate also
    multiplies by it (separate outputs keep the two in one partition)."""

    def __init__(self, *, also_scaled: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.also_scaled = also_scaled

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.linear(x, self.w), h * self.w if self.also_scaled else h, self.w.cumsum(0)


# --------------------------------------------------------------------------------------
# Edits for what a module cannot express.


def _tag_sources_external(gemm: Node) -> None:
    """Tag the weight's parameter for a .ptd file, where executorch's
    `delegate_external_constants_pass_unlifted` writes the tag."""
    for source in gemm.args[1].all_input_nodes:  # type: ignore[union-attr]
        if source.op == "placeholder" and source.name.startswith("p_"):
            source.meta[CUSTOM_META_KEY] = {"delegate_constant_tag": "weights"}


def _forget_weight_value(gemm: Node) -> None:
    """Drop the computed weight's recorded value, as a pass that forgot to record one
    would: its size is then unknown."""
    del gemm.args[1].meta[VAL_META_KEY]  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------
# The table: one entry per code. Adding a code is adding one entry here.


@dataclass(frozen=True)
class Case:
    """``judge`` gives ``code`` on ``negative`` and lets ``positive`` through."""

    code: str
    judge: Judge
    negative: Probe
    positive: Probe


_p = functools.partial
# One module for both sides of a case, or for a case and a test below: probes of equal
# modules are exported once.
_scaled_by_input = _p(_Scaled, scale_from_input=True)
_CONV_INPUT = ((1, 2, 8),)


def _budget(max_fold_bytes: int) -> FoldOptions:
    return FoldOptions(growth_budget=GrowthBudget(max_fold_bytes, max_program_fraction=0.0))


CASES: tuple[Case, ...] = (
    Case(
        "XNF501",
        PREDICATE,
        negative=Probe(_scaled_by_input),
        positive=Probe(_Scaled),
    ),
    Case(
        "XNF502",
        PREDICATE,
        negative=Probe(_Chain, options=FoldOptions(max_fold_nodes=2)),
        positive=Probe(_Chain, options=FoldOptions(max_fold_nodes=3)),
    ),
    Case(
        "XNF503",
        PREDICATE,
        negative=Probe(_Scaled, edit=_tag_sources_external),
        positive=Probe(_Scaled),
    ),
    Case(
        "XNF504",
        PREDICATE,
        negative=Probe(_p(_Scaled, other_reader=True)),
        positive=Probe(_Scaled),
    ),
    # The component is w and one neg per GEMM; max_fold_nodes=2 bounds it at 4 * 2 = 8.
    Case(
        "XNF505",
        PREDICATE,
        negative=Probe(_p(_ManyGemms, 8), options=FoldOptions(max_fold_nodes=2)),
        positive=Probe(_p(_ManyGemms, 7), options=FoldOptions(max_fold_nodes=2)),
    ),
    Case(
        "XNF506",
        PREDICATE,
        negative=Probe(_p(_SharedWithOther, v_read_elsewhere=True)),
        positive=Probe(_p(_SharedWithOther, v_read_elsewhere=False)),
    ),
    # Unreachable from an exported program: every node torch.export records has a
    # value, and a shape that depends on the inputs is already XNF501.
    Case(
        "XNF507",
        PREDICATE,
        negative=Probe(_Scaled, edit=_forget_weight_value),
        positive=Probe(_Scaled),
    ),
    Case(
        "XNF508",
        PREDICATE,
        negative=Probe(_p(_LowRank, 1), gemm=-1),
        positive=Probe(_p(_LowRank, 2), gemm=-1),
    ),
    Case(
        "XNF509",
        WRITTEN_ELSEWHERE,
        negative=Probe(_Scaled, written_buffers=frozenset({"g"})),
        positive=Probe(_Scaled),
    ),
    Case(
        "XNF510",
        ARGUMENT_RULES,
        negative=Probe(_p(_BufferWeight, written=True)),
        positive=Probe(_p(_BufferWeight, written=False)),
    ),
    Case(
        "XNF511",
        ARGUMENT_RULES,
        negative=Probe(_p(_Addmm, beta=0.5, bias_from_input=True), inputs=((2, 4), (4,))),
        positive=Probe(_p(_Addmm, beta=0.5), inputs=((2, 4), (4,))),
    ),
    Case(
        "XNF512",
        ARGUMENT_RULES,
        negative=Probe(_p(_Addmm, bias_shape=(2, 4)), inputs=((2, 4), (4,))),
        positive=Probe(_p(_Addmm, bias_shape=(4,)), inputs=((2, 4), (4,))),
    ),
    # PyTorch takes output_padding below the stride or the dilation; XNNPACK only below
    # the stride.
    Case(
        "XNF513",
        ARGUMENT_RULES,
        negative=Probe(_p(_ConvTranspose, stride=1), inputs=((1, 2, 5, 5),)),
        positive=Probe(_p(_ConvTranspose, stride=2), inputs=((1, 2, 5, 5),)),
    ),
    Case(
        "XNF514",
        ARGUMENT_RULES,
        negative=Probe(_p(_Conv1d, kernel_read_elsewhere=True), inputs=_CONV_INPUT),
        positive=Probe(_p(_Conv1d, kernel_read_elsewhere=False), inputs=_CONV_INPUT),
    ),
    Case(
        "XNF515",
        ARGUMENT_RULES,
        negative=Probe(_p(_PermutedInput, (0, 1)), inputs=((4, 4), (4, 4))),
        positive=Probe(_p(_PermutedInput, (1, 0)), inputs=((4, 4), (4, 4))),
    ),
    # A convolution has no run-time-weight form: its fold may grow the program by up to
    # max_fold_bytes (here 36 bytes are needed).
    Case(
        "XNF516",
        PREDICATE,
        negative=Probe(_ExpandedKernel, inputs=((1, 4, 8),), options=_budget(35)),
        positive=Probe(_ExpandedKernel, inputs=((1, 4, 8),), options=_budget(36)),
    ),
    # A tied table the delegate also reads otherwise than as the linear's weight.
    Case(
        "XNF517",
        PARTITIONER,
        negative=Probe(_p(_TiedTable, also_scaled=True), inputs=((2, 4), (4, 4))),
        positive=Probe(_TiedTable, inputs=((2, 4), (4, 4))),
    ),
    # The stock config's own decision (here: no fp64 GEMM), recorded by the partitioner.
    Case(
        "XNF590",
        PARTITIONER,
        negative=Probe(_Linear, dtype=torch.float64),
        positive=Probe(_Linear),
    ),
)


def _name(case: Case, side: str) -> str:
    return f"{case.code.lower()}_{side}"


# Probes outside the table, for the two rules that give XNF501.
_REWRITTEN = "rewritten_after_sweep"
_RUN_TIME_PAST_THE_BOUND = "run_time_past_the_bound"

_PROGRAMS = Programs(
    {
        **{_name(c, "negative"): (c.negative, c.judge) for c in CASES},
        **{_name(c, "positive"): (c.positive, c.judge) for c in CASES},
        _REWRITTEN: (Probe(_Scaled), PREDICATE),
        # w, x, mean and mul: more nodes than the bound.
        _RUN_TIME_PAST_THE_BOUND: (
            Probe(_scaled_by_input, options=FoldOptions(max_fold_nodes=1)),
            PREDICATE,
        ),
    }
)


def _case_id(case: Case) -> str:
    known = CODES.get(case.code)
    return f"{case.code}-{known.name}" if known else case.code


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_rule_declines_with_its_code(case: Case) -> None:
    assert _PROGRAMS.judge(_name(case, "negative")) == case.code


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_rule_passes_a_minimally_different_program(case: Case) -> None:
    assert _PROGRAMS.judge(_name(case, "positive")) == ACCEPTED


def test_every_code_has_a_case() -> None:
    """A new code without an entry in `CASES` fails here."""
    assert sorted(set(CODES) - {case.code for case in CASES}) == []


def test_every_case_is_a_known_code() -> None:
    assert sorted({case.code for case in CASES} - set(CODES)) == []


def test_a_run_time_weight_is_declined_before_its_computation_is_walked() -> None:
    """The sweep already knows the weight reads the input: a weight computed from a long
    run-time graph (attention's k.T) is XNF501 without walking it, never XNF502."""
    assert _PROGRAMS.judge(_RUN_TIME_PAST_THE_BOUND) == "XNF501"


def test_a_rewrite_after_the_sweep_is_declined_node_by_node() -> None:
    """The constant map is cached per graph and node count; a rewrite that keeps the
    count (an argument replaced in place) leaves it stale. The walked nodes are
    re-checked, so the stale map can decline a fold but never fold a run-time value."""
    ep, gemm = _PROGRAMS.gemm(_REWRITTEN)
    mul = gemm.args[1]
    assert isinstance(mul, Node)
    scale = mul.args[1]
    run_time = gemm.args[0]
    assert isinstance(scale, Node) and isinstance(run_time, Node)
    cache = new_analysis_cache()
    assert isinstance(
        run_predicate(ep, gemm, 1, options=FoldOptions(), cache=cache), WeightComputation
    )
    mul.replace_input_with(scale, run_time)
    try:
        result = run_predicate(ep, gemm, 1, options=FoldOptions(), cache=cache)
    finally:
        mul.replace_input_with(run_time, scale)
    assert isinstance(result, Rejection) and result.code.code == "XNF501"
    assert f"'{run_time.name}' is not a constant" in result.reason
