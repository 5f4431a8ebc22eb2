"""The differential oracles: a generated program lowered with the stock
``XnnpackPartitioner`` and with ``XnnpackFoldingPartitioner``, checked four ways.

(a) every method of the xnnfold ``.pte``, run through ``executorch.runtime`` (on the
    example inputs and, for a dynamic batch, on another batch size), equals eager within
    a tolerance scaled by the output's magnitude (looser where half/bfloat16 casts are);
(b) when the stock lowering succeeds and its program loads and runs, xnnfold lowers,
    loads and runs too;
(c) the xnnfold ``.pte`` is at most the stock one plus `DELEGATE_OVERHEAD_BYTES` per GEMM
    xnnfold delegates beyond stock, plus the float32 widening of half/bfloat16 sources
    that docs/how-it-works.md documents (a fold stores what a hand-folded model stores);
(d) every GEMM whose weight and bias the grammar knows to be foldable (the documented
    rule, `expected_gemms`) is delegated with its computed roles folded, wherever the
    hand-folded twin (computed tensors stored as parameters) is delegated by stock.

`check_program` runs them on one program description (`tests.support.grammar`). The
lowering they compare lives here with them, since every oracle reads its `Lowered`
results. `tests.support.quantized_differential` runs (a) to (c) on a program's
PT2E-quantized variant, and `tests.support.shrinking` turns a failure into a small
pasteable reproducer. Two callers share them: `tests/end_to_end/test_differential.py`
(a seeded slice per tier) and `benchmarks/correctness/differential_campaign.py`
(thousands of programs).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Final, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower

import xnnfold

from tests.support.grammar import (
    build_program,
    expected_gemms,
    expr_uses_cast,
    Program,
    program_exprs,
)

# Oracle (a): max |pte - eager| <= tol * max(1, max |eager|).
FP32_TOLERANCE: Final = 2e-4
CAST_TOLERANCE: Final = 2e-2
# Oracle (c): bytes an XNNPACK node and its delegate entry may cost over a portable op.
DELEGATE_OVERHEAD_BYTES: Final = 1024
ORACLES: Final = ("a", "b", "c", "d")
ORACLE_NAMES: Final = {
    "a": "xnnfold .pte equals eager",
    "b": "stock lowers and runs => xnnfold lowers and runs",
    "c": "xnnfold .pte no larger than stock beyond the delegate overhead",
    "d": "foldable GEMMs are delegated with their computed roles folded",
}


# --------------------------------------------------------------------------------------
# Lowering.


@dataclass
class Lowered:
    """One lowering of a program: the edge manager and the ``.pte`` (None when a stage
    failed; ``error`` says which and why)."""

    edge: Optional[EdgeProgramManager] = None
    buffer: Optional[bytes] = None
    outputs: dict[str, list[list[torch.Tensor]]] = field(default_factory=dict)
    error: Optional[str] = None
    stage: str = ""


def short_error(stage: str, exc: BaseException) -> str:
    """One line for a failed ``stage``: the exception and where it was raised."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{tb[-1].filename.split('site-packages/')[-1]}:{tb[-1].lineno}" if tb else "?"
    text = str(exc).strip().splitlines()
    return f"{stage}: {type(exc).__name__}: {text[0][:300] if text else ''} (at {where})"


def lower_program(
    program: Program, *, folding: bool, hand_folded: bool = False, run: bool = True
) -> Lowered:
    """Build, export, lower, emit and (with ``run``) execute every method.

    Errors are caught per stage: a lowering that fails is a result, not a crash."""
    result = Lowered()
    try:
        result.stage = "build"
        built = build_program(program, hand_folded=hand_folded)
        result.stage = "export"
        programs = {}
        for name, module in built.modules.items():
            if folding:
                module = xnnfold.prepare_for_xnnpack(module)
            programs[name] = torch.export.export(
                module, built.inputs[name], dynamic_shapes=built.dynamic_shapes[name]
            )
        result.stage = "lower"
        partitioner = xnnfold.XnnpackFoldingPartitioner() if folding else XnnpackPartitioner()
        result.edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
        result.stage = "to_executorch"
        result.buffer = result.edge.to_executorch().buffer
        if run:
            result.stage = "run"
            for name in built.modules:
                loaded = xnnfold.LoadedProgram(result.buffer, name)
                result.outputs[name] = [
                    [t.clone() for t in loaded(list(inputs))]
                    for inputs in (built.inputs[name], *built.check_inputs[name])
                ]
        result.stage = "done"
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.error = short_error(result.stage, exc)
    return result


def eager_outputs(program: Program) -> dict[str, list[torch.Tensor]]:
    built = build_program(program)
    out: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():
        for name, module in built.modules.items():
            out[name] = [
                module(*inputs) for inputs in (built.inputs[name], *built.check_inputs[name])
            ]
    return out


# --------------------------------------------------------------------------------------
# The oracles.


@dataclass(frozen=True)
class Failure:
    oracle: str
    message: str


@dataclass
class Outcome:
    """Everything checked for one program."""

    program: Program
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sizes: dict[str, Optional[int]] = field(default_factory=dict)

    @property
    def failed(self) -> frozenset[str]:
        return frozenset(f.oracle for f in self.failures)


def _uses_cast(program: Program) -> bool:
    sources = {s.name: s for s in program.sources}
    return any(expr_uses_cast(e, sources) for _, _, _, e in program_exprs(program))


def _max_error(lowered: Lowered, name: str, k: int, expected: torch.Tensor) -> Optional[float]:
    got = lowered.outputs.get(name)
    if not got or len(got[k]) != 1 or got[k][0].shape != expected.shape:
        return None
    return float((got[k][0] - expected).abs().max())


def _check_outputs(program: Program, lowered: Lowered, stock: Lowered, outcome: Outcome) -> None:
    eager = eager_outputs(program)
    tolerance = CAST_TOLERANCE if _uses_cast(program) else FP32_TOLERANCE
    for name, expected_list in eager.items():
        for k, expected in enumerate(expected_list):
            got = lowered.outputs[name][k]
            if len(got) != 1 or got[0].shape != expected.shape:
                outcome.failures.append(
                    Failure(
                        "a",
                        (
                            f"method {name!r} input set {k}: got {[tuple(g.shape) for g in got]}, "
                            f"eager {tuple(expected.shape)}"
                        ),
                    )
                )
                continue
            scale = max(1.0, float(expected.abs().max()))
            err = float((got[0] - expected).abs().max())
            if not err <= tolerance * scale:
                # Context, not an excuse: a stock program as wrong points upstream.
                stock_err = _max_error(stock, name, k, expected)
                context = (
                    "stock did not run"
                    if stock_err is None
                    else (
                        f"stock error {stock_err:.3g}"
                        + (" (upstream: stock as wrong)" if stock_err > tolerance * scale else "")
                    )
                )
                outcome.failures.append(
                    Failure(
                        "a",
                        (
                            f"method {name!r} input set {k}: max |pte - eager| = {err:.3g} > "
                            f"{tolerance:g} * {scale:.3g}; {context}"
                        ),
                    )
                )


def _stock_is_right(program: Program, stock: Lowered) -> bool:
    tolerance = CAST_TOLERANCE if _uses_cast(program) else FP32_TOLERANCE
    for name, expected_list in eager_outputs(program).items():
        for k, expected in enumerate(expected_list):
            err = _max_error(stock, name, k, expected)
            if err is None or not err <= tolerance * max(1.0, float(expected.abs().max())):
                return False
    return True


def _rows(edge: EdgeProgramManager) -> list[Any]:
    return list(xnnfold.explain(edge).rows)


def _layer_rows(rows: list[Any], method: str, layer: int) -> list[Any]:
    paths = (f"layers.{layer}", f"layers.{layer}.core")
    return [r for r in rows if r.method == method and r.module in paths]


def _delegated_count(rows: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.method] = counts.get(r.method, 0) + int(r.delegated)
    return counts


def check_size(program: Program, ours: Lowered, stock: Lowered, outcome: Outcome) -> None:
    """Oracle (c): ``ours`` is at most ``stock`` plus the allowance, else a failure."""
    assert ours.edge is not None and stock.edge is not None
    assert ours.buffer is not None and stock.buffer is not None
    ours_rows, stock_rows = _rows(ours.edge), _rows(stock.edge)
    ours_n, stock_n = _delegated_count(ours_rows), _delegated_count(stock_rows)
    extra = sum(max(0, n - stock_n.get(m, 0)) for m, n in ours_n.items())
    widened = 0
    for want in expected_gemms(program):
        if want.widened and any(r.folded for r in _layer_rows(ours_rows, want.method, want.layer)):
            widened += want.widened
    allowance = DELEGATE_OVERHEAD_BYTES * extra + widened
    excess = len(ours.buffer) - len(stock.buffer)
    if excess > allowance:
        outcome.failures.append(
            Failure(
                "c",
                (
                    f".pte {len(ours.buffer)} bytes, stock {len(stock.buffer)} bytes: +{excess} > "
                    f"allowance {allowance} ({extra} GEMMs delegated beyond stock x "
                    f"{DELEGATE_OVERHEAD_BYTES} + {widened} widened)"
                ),
            )
        )


def _check_folds(program: Program, ours: Lowered, outcome: Outcome) -> None:
    assert ours.edge is not None
    rows = _rows(ours.edge)
    suspects = []
    for want in expected_gemms(program):
        if not want.foldable:
            continue
        found = _layer_rows(rows, want.method, want.layer)
        missing = [r for r in found if not r.delegated or not set(want.computed) <= set(r.folded)]
        if not found:
            suspects.append((want, f"no GEMM row for {want.method}.layers.{want.layer}"))
        elif missing:
            r = missing[0]
            where = "delegated" if r.delegated else "on portable"
            suspects.append(
                (
                    want,
                    (
                        f"{want.method}.layers.{want.layer} ({r.op}): {where}, folded {r.folded}, "
                        f"want {want.computed} folded; reason: {r.reason}"
                    ),
                )
            )
    if not suspects:
        return
    # Only where XNNPACK takes the GEMM with static tensors: the hand-folded twin.
    twin = lower_program(program, folding=False, hand_folded=True, run=False)
    if twin.edge is None:
        outcome.notes.append(f"(d) unconfirmed, hand-folded twin failed: {twin.error}")
        return
    twin_rows = _rows(twin.edge)
    for want, message in suspects:
        twin_found = _layer_rows(twin_rows, want.method, want.layer)
        if twin_found and all(r.delegated for r in twin_found):
            outcome.failures.append(Failure("d", message))


def check_program(program: Program, oracles: tuple[str, ...] = ORACLES) -> Outcome:
    """Lower ``program`` both ways and apply ``oracles``; never raises for a finding."""
    start = time.perf_counter()
    outcome = Outcome(program)
    need_stock = any(o in oracles for o in ("b", "c"))
    stock = lower_program(program, folding=False) if need_stock else Lowered(error="skipped")
    ours = lower_program(program, folding=True)
    outcome.sizes = {
        "stock": len(stock.buffer) if stock.buffer else None,
        "xnnfold": len(ours.buffer) if ours.buffer else None,
    }
    if stock.error and need_stock:
        outcome.notes.append(f"stock: {stock.error}")
    if ours.error:
        if "b" in oracles and stock.error is None:
            outcome.failures.append(
                Failure("b", f"stock lowers and runs; xnnfold fails at {ours.error}")
            )
        elif stock.error is not None:
            outcome.notes.append(f"xnnfold: {ours.error}")
    if ours.error is None or ours.stage == "run":
        if ours.outputs and "a" in oracles and ours.error is None:
            _check_outputs(program, ours, stock, outcome)
        if ours.edge is not None and ours.buffer is not None:
            if "c" in oracles and stock.edge is not None and stock.error is None:
                if _stock_is_right(program, stock):
                    check_size(program, ours, stock, outcome)
                else:
                    # Stock delegated what XNNPACK computes wrongly (addmm's beta, a
                    # broadcast bias); xnnfold leaves it on portable, which costs bytes.
                    outcome.notes.append("(c) not checked: the stock program is wrong")
            if "d" in oracles:
                _check_folds(program, ours, outcome)
    outcome.seconds = time.perf_counter() - start
    return outcome
