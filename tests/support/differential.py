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

`check_program` runs them on one program description (`tests.support.grammar`),
`check_quantized` runs (a) to (c) on its PT2E-quantized variant, and `shrink` and
`reproducer` turn a failure into a small pasteable snippet. Two callers share them:
`tests/end_to_end/test_differential.py` (a seeded slice per tier) and
`benchmarks/correctness/differential_campaign.py` (thousands of programs).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Final, Iterator, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge_transform_and_lower

import xnnfold

from tests.support.grammar import (
    build_program,
    Chain,
    DegenerateProgram,
    expected_gemms,
    Expr,
    expr_shape,
    expr_uses_cast,
    Program,
    program_exprs,
    program_kinds,
    render_expr,
    Source,
    sources_of,
    Src,
    walk_exprs,
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


def _short_error(stage: str, exc: BaseException) -> str:
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
        result.error = _short_error(result.stage, exc)
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


def _check_size(program: Program, ours: Lowered, stock: Lowered, outcome: Outcome) -> None:
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
                    _check_size(program, ours, stock, outcome)
                else:
                    # Stock delegated what XNNPACK computes wrongly (addmm's beta, a
                    # broadcast bias); xnnfold leaves it on portable, which costs bytes.
                    outcome.notes.append("(c) not checked: the stock program is wrong")
            if "d" in oracles:
                _check_folds(program, ours, outcome)
    outcome.seconds = time.perf_counter() - start
    return outcome


# --------------------------------------------------------------------------------------
# Shrinking and reproducers.


def _fresh_source(program: Program, shape: tuple[int, ...]) -> tuple[Program, Src]:
    names = {s.name for s in program.sources}
    k = len(names)
    while f"z{k}" in names:
        k += 1
    src = Source(f"z{k}", shape)
    return replace(program, sources=(*program.sources, src)), Src(src.name)


def _replace_arg(program: Program, m: int, i: int, role: str, expr: Optional[Expr]) -> Program:
    method = program.methods[m]
    layers = list(method.layers)
    layers[i] = replace(layers[i], **{role: expr})
    methods = list(program.methods)
    methods[m] = replace(method, layers=tuple(layers))
    return replace(program, methods=tuple(methods))


def _simpler_exprs(program: Program, expr: Expr) -> Iterator[tuple[Program, Expr]]:
    sources = {s.name: s for s in program.sources}
    shape = expr_shape(expr, sources)
    if isinstance(expr, Chain) and expr.steps > 2:
        yield program, replace(expr, steps=expr.steps // 2)
    for child in list(walk_exprs(expr))[1:6]:
        try:
            if expr_shape(child, sources) == shape:
                yield program, child
        except Exception:
            continue
    if not isinstance(expr, Src):
        yield _fresh_source(program, shape)


def _candidates(program: Program) -> Iterator[Program]:
    if len(program.methods) > 1:
        for m in range(len(program.methods)):
            yield replace(program, methods=program.methods[:m] + program.methods[m + 1 :])
    for m, method in enumerate(program.methods):
        methods = list(program.methods)
        for k in range(1, len(method.layers)):
            methods[m] = replace(method, layers=method.layers[:k])
            yield replace(program, methods=tuple(methods))
        if method.side:
            methods[m] = replace(method, side=())
            yield replace(program, methods=tuple(methods))
    for m, method in enumerate(program.methods):
        for i, layer in enumerate(method.layers):
            if layer.module:
                continue
            if layer.bias is not None and layer.kind != "addmm":
                yield _replace_arg(program, m, i, "bias", None)
            if layer.kind == "addmm" and (layer.alpha, layer.beta) != (1.0, 1.0):
                for fields in ({"alpha": 1.0}, {"beta": 1.0}):
                    methods = list(program.methods)
                    layers = list(method.layers)
                    layers[i] = replace(layer, **fields)
                    methods[m] = replace(method, layers=tuple(layers))
                    yield replace(program, methods=tuple(methods))
            for role in ("weight", "bias"):
                expr = getattr(layer, role)
                if expr is None:
                    continue
                for prog, simpler in _simpler_exprs(program, expr):
                    yield _replace_arg(prog, m, i, role, simpler)


def _prune(program: Program) -> Program:
    used = {n for _, _, _, e in program_exprs(program) for n in sources_of(e)}
    return replace(program, sources=tuple(s for s in program.sources if s.name in used))


def shrink(program: Program, oracle: str, *, attempts: int) -> tuple[Program, Outcome]:
    """Greedy: take the first simpler candidate that still fails ``oracle``, repeat;
    at most ``attempts`` re-checks (deterministic: no clock involved)."""
    oracles = tuple(sorted({oracle, "b"} if oracle in ("a", "d") else {oracle}))
    best = program
    best_outcome: Optional[Outcome] = None
    tried = 0
    improved = True
    while improved and tried < attempts:
        improved = False
        for candidate in _candidates(best):
            if tried >= attempts:
                break
            candidate = _prune(candidate)
            try:
                build_program(candidate)
            except (DegenerateProgram, RuntimeError, ValueError, IndexError):
                continue
            tried += 1
            outcome = check_program(candidate, oracles)
            if oracle in outcome.failed:
                best, best_outcome, improved = candidate, outcome, True
                break
    return best, best_outcome or check_program(best, oracles)


def describe(program: Program) -> str:
    """Comment lines: what each method computes, for a reader of the reproducer."""
    lines = [f"# scenario {program.scenario}; kinds: {', '.join(program_kinds(program))}"]
    for method in program.methods:
        lines.append(
            f"# method {method.name!r} ({method.kind}, batch {method.batch}"
            f"{' dynamic' if method.dynamic else ''}, in {method.in_ch}x{method.spatial})"
        )
        for i, layer in enumerate(method.layers):
            geo = ""
            if layer.kind.startswith("conv"):
                geo = (
                    f" k={layer.kernel} s={layer.stride} p={layer.padding} d={layer.dilation} "
                    f"g={layer.groups} op={layer.output_padding}"
                )
            elif layer.kind == "addmm":
                geo = f" alpha={layer.alpha} beta={layer.beta} bias={layer.bias_shape}"
            lines.append(
                f"#   layers.{i}: {layer.kind} {layer.in_ch}->{layer.out_ch}{geo} act={layer.act}"
                f"{' (module call)' if layer.module else ''}"
            )
            lines.append(f"#     weight = {render_expr(layer.weight)[:200]}")
            if layer.bias is not None:
                lines.append(f"#     bias   = {render_expr(layer.bias)[:200]}")
        for e in method.side:
            lines.append(f"#   side use: y + tanh({render_expr(e)}).mean()")
        if method.table is not None:
            lines.append(f"#   embedding(idx, {render_expr(method.table)})")
    return "\n".join(lines)


def reproducer(program: Program, failure: Failure) -> str:
    """A snippet to paste into a Python shell at the repository root."""
    return "\n".join(
        [
            f"# oracle ({failure.oracle}) {ORACLE_NAMES[failure.oracle]}: {failure.message}",
            describe(program),
            "from tests.support.grammar import *",
            "from tests.support.differential import check_program, check_quantized",
            f"program = {program!r}",
            "built = build_program(program)  # .modules / .inputs / .dynamic_shapes per method",
            "outcome = check_program(program)",
            "print(outcome.failures, outcome.notes)",
        ]
    )


def failure_report(outcome: Outcome, *, attempts: int) -> str:
    """Every failure of ``outcome``, each with a (shrunk) reproducer."""
    parts = []
    for failure in outcome.failures:
        small, small_outcome = shrink(outcome.program, failure.oracle, attempts=attempts)
        shown = next((f for f in small_outcome.failures if f.oracle == failure.oracle), failure)
        parts.append(reproducer(small, shown))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------
# PT2E-quantized variants.

# int8 XNNPACK kernels and the quantize/dequantize reference round differently: a few
# quantization steps of the output.
QUANTIZED_TOLERANCE: Final = 0.1


def _quantized_programs(program: Program, *, folding: bool) -> dict[str, Any]:
    """``prepare_pt2e`` -> calibrate -> ``convert_pt2e`` -> export, per method, with
    XNNPACKQuantizer's static per-channel config."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        get_symmetric_quantization_config,
        XNNPACKQuantizer,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    built = build_program(program)
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)
    )
    programs: dict[str, Any] = {}
    for name, module in built.modules.items():
        if folding:
            module = xnnfold.prepare_for_xnnpack(module)
        inputs = built.inputs[name]
        prepared = prepare_pt2e(torch.export.export(module, inputs).module(), quantizer)
        prepared(*inputs)
        programs[name] = xnnfold.remove_unused_constants(
            torch.export.export(convert_pt2e(prepared), inputs)
        )
    return programs


def check_quantized(program: Program) -> Outcome:
    """Oracles (a) against the converted program, (b) and (c) against stock, on the
    PT2E-quantized program (the fold rule (d) does not apply: convert_pt2e folds
    quantized weights itself)."""
    start = time.perf_counter()
    outcome = Outcome(program)
    built = build_program(program)
    results: dict[str, Lowered] = {}
    references: dict[str, dict[str, torch.Tensor]] = {}
    for variant in ("stock", "xnnfold"):
        result = Lowered()
        try:
            result.stage = "quantize"
            programs = _quantized_programs(program, folding=variant == "xnnfold")
            references[variant] = {n: ep.module()(*built.inputs[n]) for n, ep in programs.items()}
            result.stage = "lower"
            partitioner = (
                xnnfold.XnnpackFoldingPartitioner()
                if variant == "xnnfold"
                else XnnpackPartitioner()
            )
            result.edge = to_edge_transform_and_lower(programs, partitioner=[partitioner])
            result.buffer = result.edge.to_executorch().buffer
            result.stage = "run"
            for name in programs:
                loaded = xnnfold.LoadedProgram(result.buffer, name)
                result.outputs[name] = [[t.clone() for t in loaded(list(built.inputs[name]))]]
            result.stage = "done"
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            result.error = _short_error(result.stage, exc)
        results[variant] = result
    stock, ours = results["stock"], results["xnnfold"]
    if ours.error is not None:
        if stock.error is None:
            outcome.failures.append(
                Failure("b", f"quantized: stock lowers and runs; xnnfold fails at {ours.error}")
            )
        else:
            outcome.notes.append(f"quantized: both fail; xnnfold at {ours.error}")
        return outcome
    for name, expected in references["xnnfold"].items():
        got = ours.outputs[name][0]
        scale = max(1.0, float(expected.abs().max()))
        err = (
            float((got[0] - expected).abs().max())
            if got[0].shape == expected.shape
            else float("inf")
        )
        if not err <= QUANTIZED_TOLERANCE * scale:
            stock_err = (
                float((stock.outputs[name][0][0] - references["stock"][name]).abs().max())
                if stock.error is None
                else None
            )
            message = (
                f"quantized method {name!r}: max |pte - converted| = {err:.3g} > "
                f"{QUANTIZED_TOLERANCE:g} * {scale:.3g}; stock error {stock_err}"
            )
            if stock_err is not None and stock_err > QUANTIZED_TOLERANCE * scale:
                # The converted program runs differently in executorch whatever the
                # partitioner (seen with every GEMM on portable): upstream, not ours.
                outcome.notes.append(f"upstream: {message}")
            else:
                outcome.failures.append(Failure("a", message))
    if stock.error is None and stock.buffer is not None and ours.buffer is not None:
        stock_right = all(
            float((stock.outputs[n][0][0] - e).abs().max())
            <= QUANTIZED_TOLERANCE * max(1.0, float(e.abs().max()))
            for n, e in references["stock"].items()
        )
        if stock_right:
            _check_size(program, ours, stock, outcome)
    outcome.seconds = time.perf_counter() - start
    return outcome
