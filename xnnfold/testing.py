"""A test helper: every GEMM inside an XNNPACK delegate, and the `.pte` computes what eager does.

A test that only checks that `to_edge_transform_and_lower` succeeds keeps passing when a GEMM
with a computed weight silently falls back to the portable kernels, the very regression
xnnfold exists to prevent. A test that only counts delegates keeps passing when the delegate
computes something else. `assert_fully_delegated` lowers the model exactly as
`xnnfold.lower` does, fails if any GEMM is left outside a delegate, runs the `.pte` through
`executorch.runtime` against eager PyTorch, and puts the `xnnfold.explain` table (which GEMM,
which module, why) in the failure message.

    from xnnfold.testing import assert_fully_delegated

    def test_vocoder_lowers() -> None:
        assert_fully_delegated(Vocoder().eval(), (torch.randn(1, 80, 200),))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from executorch.exir import EdgeProgramManager, ExecutorchProgramManager
from torch import nn

from xnnfold._upstream import tree_flatten
from xnnfold.lowering._lower import lower
from xnnfold.lowering._runtime import LoadedProgram
from xnnfold.passes import XnnpackFoldingPartitioner
from xnnfold.passes.report._explain import explain, ExplainReport, GemmRow
from xnnfold.passes.report._summary import ProgramSummary, summarize
from xnnfold.rewriter import is_prepared, unprepare_for_xnnpack

__all__ = ["DelegationCheck", "OutputMismatch", "assert_fully_delegated"]


@dataclass(frozen=True)
class OutputMismatch:
    """One output of the `.pte` that differs from eager beyond the tolerance.

    Attributes:
        index: position among the flattened outputs (``torch.utils._pytree`` order, which is
            the order of the `.pte` method's outputs).
        problem: what differs, e.g. ``"max abs error 3.1e-02 at (0, 4, 7) ..."``.
        max_abs_error: ``max |pte - eager|`` (``inf`` when shapes or dtypes differ).
    """

    index: int
    problem: str
    max_abs_error: float

    def __str__(self) -> str:
        return f"output {self.index}: {self.problem}"


@dataclass(frozen=True)
class DelegationCheck:
    """What `assert_fully_delegated` lowered and measured, for further assertions.

    Attributes:
        edge: the lowered `EdgeProgramManager` (before ``to_executorch``).
        program: the emitted `ExecutorchProgramManager`.
        report: `xnnfold.explain` of ``edge``: one row per GEMM.
        summary: `xnnfold.summarize` of ``edge``: delegates and ops left outside them.
        max_abs_error: the largest ``|pte - eager|`` over all outputs, or None when outputs
            were not checked.
    """

    edge: EdgeProgramManager
    program: ExecutorchProgramManager
    report: ExplainReport
    summary: ProgramSummary
    max_abs_error: Optional[float]

    @property
    def buffer(self) -> bytes:
        """The `.pte` bytes."""
        return self.program.buffer


def _leaves(value: Any) -> list[Any]:
    return tree_flatten(value)[0]


def _compare_output(
    index: int, actual: Any, expected: Any, *, atol: float, rtol: float
) -> tuple[float, Optional[OutputMismatch]]:
    """``(max abs error, mismatch or None)`` for one flattened output."""
    if not isinstance(expected, torch.Tensor):
        if actual == expected:
            return 0.0, None
        return float("inf"), OutputMismatch(
            index, f".pte returned {actual!r}, eager {expected!r}", float("inf")
        )
    if not isinstance(actual, torch.Tensor):
        problem = f".pte returned {type(actual).__name__}, eager a tensor"
        return float("inf"), OutputMismatch(index, problem, float("inf"))
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        problem = (
            f".pte returned {actual.dtype} {tuple(actual.shape)}, "
            f"eager {expected.dtype} {tuple(expected.shape)}"
        )
        return float("inf"), OutputMismatch(index, problem, float("inf"))
    if expected.numel() == 0:
        return 0.0, None
    # float64 so that integer outputs and large float errors compare exactly.
    a, e = actual.detach().double(), expected.detach().double()
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    error = (a - e).abs()
    both_nan = a.isnan() & e.isnan()
    error = torch.where(both_nan, torch.zeros_like(error), error)
    # A NaN on one side only is an infinite error, not one that max() silently skips.
    error = torch.where(error.isnan(), torch.full_like(error, float("inf")), error)
    max_error = float(error.max())
    if bool(close.all()):
        return max_error, None
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    bad = int((~close).sum())
    problem = (
        f"max abs error {max_error:.3e} at {worst} (eager {e[worst].item():.6g}, "
        f".pte {a[worst].item():.6g}, shape {tuple(expected.shape)}); "
        f"{bad:,} of {expected.numel():,} elements exceed atol={atol:g} + "
        f"rtol={rtol:g} * |eager|"
    )
    return max_error, OutputMismatch(index, problem, max_error)


def _compare_outputs(
    actual: Sequence[Any], expected: Any, *, atol: float, rtol: float
) -> tuple[float, list[OutputMismatch]]:
    expected_leaves = _leaves(expected)
    if len(actual) != len(expected_leaves):
        problem = f".pte returned {len(actual)} outputs, eager {len(expected_leaves)}"
        return float("inf"), [OutputMismatch(0, problem, float("inf"))]
    max_error = 0.0
    mismatches = []
    for index, (a, e) in enumerate(zip(actual, expected_leaves)):
        error, mismatch = _compare_output(index, a, e, atol=atol, rtol=rtol)
        max_error = max(max_error, error)
        if mismatch is not None:
            mismatches.append(mismatch)
    return max_error, mismatches


def _gemm_line(row: GemmRow) -> str:
    return f"{row.node} ({row.op}) in module '{row.module}': {row.reason or 'no reason'}" + (
        f" [{row.code}]" if row.code else ""
    )


def _outside_lines(report: ExplainReport) -> list[str]:
    """A heading and one line per GEMM left outside a delegate (none when all are in)."""
    if not report.outside:
        return []
    return [f"{len(report.outside)} GEMM(s) left outside a delegate:"] + [
        f"  {_gemm_line(row)}" for row in report.outside
    ]


def _failure_message(
    model: nn.Module,
    report: ExplainReport,
    summary: ProgramSummary,
    mismatches: Sequence[OutputMismatch],
    *,
    all_ops: bool,
) -> str:
    lines = [f"assert_fully_delegated: {type(model).__name__} failed"]
    lines.extend(_outside_lines(report))
    if all_ops and summary.outside_ops:
        lines.append(f"ops left outside delegates: {summary.outside_ops_text()}")
    if mismatches:
        lines.append("the .pte differs from eager (run through executorch.runtime):")
        lines.extend(f"  {m}" for m in mismatches)
    lines.append(
        f"delegates: {summary.delegates}; ops outside delegates: {summary.outside_ops_text()}"
    )
    lines.append("")
    lines.append(report.table())
    return "\n".join(lines)


def _lower_beside_eager(
    model: nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Optional[Any],
    partitioner: Optional[XnnpackFoldingPartitioner],
    eager: bool,
) -> tuple[EdgeProgramManager, Any]:
    """`lower` ``model``, and with ``eager`` its eager outputs first; the model is left
    prepared only if it was prepared before."""
    was_prepared = is_prepared(model)
    try:
        expected = None
        if eager:
            # Before export: whatever export does to the model cannot leak into the reference.
            with torch.no_grad():
                expected = model(*example_inputs)
        edge = lower(
            model,
            example_inputs,
            dynamic_shapes=dynamic_shapes,
            partitioner=partitioner,
        )
    finally:
        if not was_prepared:
            unprepare_for_xnnpack(model)
    return edge, expected


def assert_fully_delegated(
    model: nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Optional[Any] = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    partitioner: Optional[XnnpackFoldingPartitioner] = None,
    check_outputs: bool = True,
    all_ops: bool = False,
) -> DelegationCheck:
    """Lower ``model`` with xnnfold and assert that every GEMM is delegated and correct.

    Lowers like `xnnfold.lower` (`prepare_for_xnnpack`, ``torch.export.export``,
    ``to_edge_transform_and_lower`` with `XnnpackFoldingPartitioner`), then asserts:

    - no convolution, linear, addmm or mm is left outside an XNNPACK delegate
      (``xnnfold.explain(edge).outside`` is empty);
    - with ``all_ops=True``, no other op is left outside a delegate either;
    - with ``check_outputs=True``, the `.pte` run through ``executorch.runtime`` on
      ``example_inputs`` matches eager ``model(*example_inputs)`` output by output:
      ``|pte - eager| <= atol + rtol * |eager|``, same shapes and dtypes.

    ``prepare_for_xnnpack`` works in place; a model that was not prepared before the call is
    unprepared again afterwards (a prepared one stays prepared), so the model is left as it
    was passed. Put it in eval mode first: eager outputs are computed under
    ``torch.no_grad()`` with the model as given.

    Args:
        model: the model, normally in eval mode.
        example_inputs: positional inputs, a tuple (``(x,)`` for one tensor).
        dynamic_shapes: passed to ``torch.export.export``.
        atol: absolute tolerance of the output comparison.
        rtol: relative tolerance of the output comparison.
        partitioner: a configured `XnnpackFoldingPartitioner` (default options otherwise).
        check_outputs: False skips running the `.pte` (delegation is still checked).
        all_ops: True also fails on non-GEMM ops left outside delegates.

    Returns:
        A `DelegationCheck` holding the lowered programs, the explain report, the summary
        and the largest output error, for further assertions.

    Raises:
        AssertionError: a GEMM (or, with ``all_ops``, any op) was left outside a delegate,
            or an output differs from eager. The message names each GEMM and why it stayed
            out, the worst error of each differing output, and the ``xnnfold.explain``
            table.
        TypeError: ``example_inputs`` is not a tuple.

    Example::

        check = assert_fully_delegated(model.eval(), (torch.randn(1, 80, 200),))
        assert check.summary.delegates == 1
    """
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            "assert_fully_delegated: example_inputs must be a tuple of positional inputs, "
            f"got {type(example_inputs).__name__}; wrap a single tensor as (x,)"
        )
    edge, expected = _lower_beside_eager(
        model,
        example_inputs,
        dynamic_shapes=dynamic_shapes,
        partitioner=partitioner,
        eager=check_outputs,
    )
    report = explain(edge)
    summary = summarize(edge)
    program = edge.to_executorch()

    max_error: Optional[float] = None
    mismatches: list[OutputMismatch] = []
    if check_outputs:
        try:
            actual = LoadedProgram.of(program)(_leaves(example_inputs))
        except Exception as error:
            error.add_note(report.table())
            raise
        max_error, mismatches = _compare_outputs(actual, expected, atol=atol, rtol=rtol)

    if report.outside or mismatches or (all_ops and summary.outside_ops):
        raise AssertionError(_failure_message(model, report, summary, mismatches, all_ops=all_ops))
    return DelegationCheck(edge, program, report, summary, max_error)
