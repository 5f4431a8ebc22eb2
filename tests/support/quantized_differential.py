"""The differential oracles on a program's PT2E-quantized variant.

`check_quantized` quantizes a program description (`tests.support.grammar`) with
XNNPACKQuantizer's static per-channel config, lowers it with the stock
``XnnpackPartitioner`` and with ``XnnpackFoldingPartitioner``, and applies oracles (a)
to (c) of `tests.support.differential` (whose `Lowered`, `Outcome` and size oracle it
reuses): against the converted program rather than eager, within `QUANTIZED_TOLERANCE`.
It is apart from the fp32 oracles because it lowers differently (quantize, calibrate,
convert first) and imports torchao's PT2E flow, which only the quantized seeds need.
"""

from __future__ import annotations

import time
from typing import Any, Final

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import xnnfold

from tests.support.differential import check_size, Failure, Lowered, Outcome, short_error
from tests.support.grammar import build_program, Program

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
            result.error = short_error(result.stage, exc)
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
            check_size(program, ours, stock, outcome)
    outcome.seconds = time.perf_counter() - start
    return outcome
