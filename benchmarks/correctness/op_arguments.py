"""Differential campaign over op arguments: stock XNNPACK vs xnnfold vs eager, per config.

For every op config the folding partitioner delegates (executorch's
``ALL_PARTITIONER_CONFIGS`` with the stock GEMM configs replaced by xnnfold's, read from
the installed executorch), each case in `_op_argument_cases` sets the arguments that change
the op's result. Each case is exported once per partitioner, lowered with the stock
`XnnpackPartitioner` and with `XnnpackFoldingPartitioner`, and each `.pte` is run through
`executorch.runtime` against eager PyTorch on inputs that exercise the argument. Recorded
per partitioner: the max abs difference from eager, the same relative to the output scale
(max |eager|, at least 1), whether the op was delegated (checked on the lowered graph: the
op inside an ``executorch_call_delegate``'s program, not a top-level call), and lowering or
runtime errors as their own outcome.

A config with no case is reported and fails the run: the campaign covers every config the
partitioner delegates, or says which it does not.

    cd /work/wt/opargs && PYTHONPATH=. nice -n 5 /work/venv/bin/python \
        benchmarks/correctness/op_arguments.py --out benchmarks/correctness/op_arguments_results.md
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.canonical_partitioners.config_partitioner import (
    format_target_name,
)
from executorch.exir.lowered_backend_module import LoweredBackendModule
from executorch.runtime import Runtime
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _op_argument_cases import (
    Case,
    CASES,
    Fn,
    FP16,
    FP32,
    INT4_AFFINE,
    INT8,
    INT8_DYNAMIC,
)

import xnnfold
from xnnfold.passes import folding_configs

# Max abs difference from eager relative to the output scale (max |eager|, at least 1)
# above which a program is counted wrong. fp32: a few ulps of accumulation order and
# XNNPACK's transcendental approximations; fp16: the program computes in fp16 against
# fp32 eager on the same fp16-rounded values; int8: a few quantization steps against the
# eager converted (q/dq) model.
TOLERANCE = {FP32: 1e-5, FP16: 1e-2, INT8: 5e-2, INT8_DYNAMIC: 5e-2, INT4_AFFINE: 5e-2}

DELEGATE_CALL = "executorch_call_delegate"


@dataclass(frozen=True)
class Outcome:
    """What one partitioner's program did on one case."""

    error: Optional[str] = None  # "lowering: ..." or "runtime: ..."
    abs_diff: float = math.nan
    rel_diff: float = math.nan
    delegated: str = "-"  # yes / no / partial / absent (the op is not in the lowered graph)
    buffer: bytes = b""

    def wrong(self, tolerance: float) -> bool:
        return self.error is None and not self.rel_diff <= tolerance


def _names(target: Any) -> str:
    return format_target_name(getattr(target, "__name__", str(target)))


def _count(graph: torch.fx.Graph, target: str) -> int:
    return sum(
        1 for node in graph.nodes if node.op == "call_function" and _names(node.target) == target
    )


def delegation(manager: Any, target: str) -> str:
    """Whether ``target`` runs in a delegate: counted on the lowered edge program, at top
    level and inside each delegate's own program."""
    gm = manager.exported_program().graph_module
    top = _count(gm.graph, target)
    inside = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and DELEGATE_CALL in _names(node.target):
            lowered = getattr(gm, node.args[0].target)
            assert isinstance(lowered, LoweredBackendModule)
            inside += _count(lowered.original_module.graph, target)
    if top and inside:
        return "partial"
    return "yes" if inside else "no" if top else "absent"


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flatten(item)]


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ").replace("|", "/")
    return text[:110]


def prepared(case: Case) -> tuple[nn.Module, tuple[torch.Tensor, ...], list[torch.Tensor]]:
    """The module to export, its inputs, and eager's outputs (the reference)."""
    module = case.make().eval()
    inputs = case.inputs()
    if case.precision == FP16:
        reference_module = copy.deepcopy(module).half().float()
        half_inputs = tuple(x.half() for x in inputs)
        with torch.no_grad():
            reference = _flatten(reference_module(*(x.float() for x in half_inputs)))
        return module.half(), half_inputs, reference
    if case.precision in (INT8, INT8_DYNAMIC):
        module = quantize_pt2e(module, inputs, dynamic=case.precision == INT8_DYNAMIC)
    elif case.precision == INT4_AFFINE:
        module = quantize_affine(module)
    with torch.no_grad():
        reference = _flatten(module(*inputs))
    return module, inputs, reference


def quantize_pt2e(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], *, dynamic: bool
) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        get_symmetric_quantization_config,
        XNNPACKQuantizer,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    )
    graph = torch.export.export(module, inputs).module()
    observed = prepare_pt2e(graph, quantizer)
    observed(*inputs)
    return convert_pt2e(observed)


def quantize_affine(module: nn.Module) -> nn.Module:
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

    quantize_(
        module,
        Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        ),
    )
    return module


def run_one(
    case: Case,
    partitioner: Callable[[], Any],
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    reference: list[torch.Tensor],
) -> Outcome:
    try:
        dynamic = case.dynamic
        if dynamic is not None and isinstance(module, Fn):
            dynamic = {"inputs": dynamic}  # Fn.forward takes *inputs
        ep = torch.export.export(module, inputs, dynamic_shapes=dynamic)
        manager = to_edge_transform_and_lower(ep, partitioner=[partitioner()])
        delegated = delegation(manager, case.target)
        buffer = manager.to_executorch().buffer
    except Exception as error:
        return Outcome(error=f"lowering: {_short(error)}")
    try:
        program = Runtime.get().load_program(buffer)
        method = program.load_method("forward")
        outputs = _flatten(method.execute(list(inputs)))
    except Exception as error:
        return Outcome(error=f"runtime: {_short(error)}", delegated=delegated, buffer=buffer)
    if len(outputs) != len(reference) or any(
        o.shape != r.shape for o, r in zip(outputs, reference)
    ):
        shapes = [tuple(o.shape) for o in outputs], [tuple(r.shape) for r in reference]
        return Outcome(
            error=f"runtime: output shapes {shapes[0]} vs eager {shapes[1]}",
            delegated=delegated,
            buffer=buffer,
        )
    abs_diff = rel_diff = 0.0
    for out, ref in zip(outputs, reference):
        if ref.is_floating_point():
            diff = (out.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
            scale = max(ref.double().abs().max().item() if ref.numel() else 0.0, 1.0)
        else:
            diff = float((out != ref).sum().item())
            scale = 1.0
        abs_diff, rel_diff = max(abs_diff, diff), max(rel_diff, diff / scale)
    del method, program
    return Outcome(abs_diff=abs_diff, rel_diff=rel_diff, delegated=delegated, buffer=buffer)


def verdict(case: Case, stock: Outcome, folding: Outcome) -> str:
    tolerance = TOLERANCE[case.precision]
    if folding.error and not stock.error:
        return "XNNFOLD ERROR"
    if folding.wrong(tolerance):
        return "XNNFOLD WRONG"
    if stock.wrong(tolerance):
        return "stock wrong, xnnfold right"
    if stock.error and folding.error:
        return "both error"
    if stock.error:
        return "stock error, xnnfold right"
    return "ok"


def _diff(outcome: Outcome) -> str:
    if outcome.error:
        return outcome.error
    return f"{outcome.abs_diff:.2e} ({outcome.rel_diff:.1e})"


def delegated_configs() -> list[str]:
    """The config classes `XnnpackFoldingPartitioner()` is built with, by default."""
    return [config.__name__ for config in folding_configs(ALL_PARTITIONER_CONFIGS)]


STOCK_NAME = {
    "FoldingConvolutionConfig": "ConvolutionConfig",
    "FoldingLinearConfig": "LinearConfig",
    "FoldingAddmmConfig": "AddmmConfig",
    "FoldingMMConfig": "MMConfig",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--only", help="run only cases whose config contains this text")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    configs = delegated_configs()
    by_config: dict[str, list[Case]] = {}
    for case in CASES:
        by_config.setdefault(case.config, []).append(case)
    known = {STOCK_NAME.get(name, name) for name in configs}
    stray = sorted(set(by_config) - known)
    if stray:
        raise SystemExit(f"cases name configs the partitioner does not have: {stray}")
    missing = [name for name in configs if not by_config.get(STOCK_NAME.get(name, name))]

    rows = []
    start = time.monotonic()
    for name in configs:
        for case in by_config.get(STOCK_NAME.get(name, name), []):
            if args.only and args.only not in name:
                continue
            try:
                module, inputs, reference = prepared(case)
            except Exception as error:
                failed = Outcome(error=f"case: {_short(error)}")
                rows.append((name, case, failed, failed, "CASE ERROR"))
                print(
                    f"{name} | {case.arguments} | case error {traceback.format_exc()}", flush=True
                )
                continue
            stock = run_one(case, XnnpackPartitioner, copy.deepcopy(module), inputs, reference)
            folding = run_one(
                case, xnnfold.XnnpackFoldingPartitioner, copy.deepcopy(module), inputs, reference
            )
            rows.append((name, case, stock, folding, verdict(case, stock, folding)))
            print(
                f"{name} | {case.target} | {case.precision} | {case.arguments} | {_diff(stock)} "
                f"{stock.delegated} | {_diff(folding)} {folding.delegated} | {rows[-1][-1]}",
                flush=True,
            )
    elapsed = time.monotonic() - start
    write(args.out, rows, configs, missing, elapsed)
    if missing:
        print(f"configs with no case: {missing}", file=sys.stderr)
        return 1
    return 0


def write(
    out: Optional[Path],
    rows: list[tuple[str, Case, Outcome, Outcome, str]],
    configs: list[str],
    missing: list[str],
    elapsed: float,
) -> None:
    if out is None:
        return
    import executorch.version

    counts: dict[str, int] = {}
    for *_, v in rows:
        counts[v] = counts.get(v, 0) + 1
    identical = sum(1 for _, _, s, f, _ in rows if s.buffer and s.buffer == f.buffer)
    built = sum(1 for _, _, s, f, _ in rows if s.buffer and f.buffer)
    lines = [
        "# Op arguments: stock XNNPACK and xnnfold against eager",
        "",
        "Made by (from the repository root):",
        "",
        "    PYTHONPATH=. nice -n 5 /work/venv/bin/python benchmarks/correctness/op_arguments.py \\",
        "        --out benchmarks/correctness/op_arguments_results.md",
        "",
        f"torch {torch.__version__}, executorch {executorch.version.__version__}; "
        f"{len(rows)} cases over {len(configs)} configs in {elapsed:.0f} s.",
        "",
        "Each case is exported, lowered with the stock `XnnpackPartitioner` and with "
        "`XnnpackFoldingPartitioner()`, and each `.pte` run through `executorch.runtime` "
        "against eager. A diff cell is the max abs difference from eager, then (in "
        "parentheses) that relative to the output scale, max |eager| and at least 1. "
        "*Delegated* is read from the lowered graph: `yes` when the op is inside an "
        "`executorch_call_delegate`'s program, `no` when it is a top-level call, `partial` "
        "for both, `absent` when the lowered graph has no such op (decomposed). Errors "
        "(lowering, runtime) are their own outcome.",
        "",
        "Tolerances, on the relative diff: "
        + "; ".join(f"{p} {t:g}" for p, t in TOLERANCE.items())
        + ". fp16 cases compare the fp16 program with fp32 eager on the same fp16-rounded "
        "weights and inputs; int8 cases (PT2E `XNNPACKQuantizer`, per-channel symmetric) and "
        "int4-affine cases (torchao `Int8DynamicActivationIntxWeightConfig`, int4, group 32) "
        "compare with the eager quantized model.",
        "",
        f"Verdicts: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}. "
        f"Stock's and xnnfold's `.pte` are byte-identical in {identical} of the {built} cases "
        "both lowered.",
        "",
    ]
    if missing:
        lines += [f"**Configs with no case:** {', '.join(missing)}", ""]
    lines += [
        "| config | op | dtype | arguments | stock diff | xnnfold diff | delegated (stock / xnnfold) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, case, stock, folding, v in rows:
        lines.append(
            f"| {name} | `{case.target}` | {case.precision}{' dyn' if case.dynamic else ''} | "
            f"{case.arguments} | {_diff(stock)} | {_diff(folding)} | "
            f"{stock.delegated} / {folding.delegated} | {v} |"
        )
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
