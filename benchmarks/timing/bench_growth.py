"""Latency and program bytes with and without the growth budget.

Each fixture is exported once at ``--length`` samples and lowered with
`XnnpackFoldingPartitioner` twice: ``growth_budget=NO_GROWTH`` (every fold that grows the
program declined, the broadcast filters' convolutions on the portable kernels) and the
default budget. Both programs are loaded with ``executorch.runtime`` in one process and
timed interleaved (the order alternates per repeat); the table gives the median ms per
call, the ratio, the ``.pte`` bytes, the GEMMs on portable, the bytes the folds added and
the largest difference from eager.

    python benchmarks/timing/bench_growth.py --fixtures anti_aliased_block --length 4096 \\
        --repeats 7 --calls 20 --out benchmarks/timing/growth_results.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

import xnnfold
from xnnfold.fixtures import FIXTURES

warnings.filterwarnings("ignore")
VARIANTS: dict[str, xnnfold.GrowthBudget] = {
    "NO_GROWTH": xnnfold.NO_GROWTH,
    "default": xnnfold.DEFAULT_GROWTH_BUDGET,
}


def _inputs(name: str, length: int) -> tuple[torch.Tensor, ...]:
    (example,) = FIXTURES[name].inputs()
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(*example.shape[:-1], length, generator=generator),)


def _lower(name: str, inputs: tuple[Any, ...], budget: xnnfold.GrowthBudget) -> dict[str, Any]:
    model = FIXTURES[name].model()
    partitioner = xnnfold.XnnpackFoldingPartitioner(
        growth_budget=budget, facts=xnnfold.CrossMethodFacts()
    )
    edge = xnnfold.lower(model, inputs, partitioner=partitioner)
    report = xnnfold.explain(edge)
    buffer = edge.to_executorch().buffer
    program = xnnfold.LoadedProgram(buffer)
    error = float((program(inputs)[0] - FIXTURES[name].model()(*inputs)).abs().max())
    return {
        "program": program,
        "bytes": len(buffer),
        "outside": len(report.outside),
        "gemms": len(report.rows),
        "growth": report.growth,
        "error": error,
    }


def _time(program: xnnfold.LoadedProgram, inputs: tuple[Any, ...], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        program(inputs)
    return (time.perf_counter() - start) / calls * 1000


def survey() -> list[str]:
    """Every fixture's folds that grow the program and may spend budget (a GEMM with no
    run-time-weight form), measured on the exported program: the evidence for the
    default budget."""
    from xnnfold.passes import FoldOptions
    from xnnfold.passes.analysis import (
        find_weight_computation,
        gemm_positions,
        growth_of,
        program_bytes,
    )

    lines = [
        "| fixture | growing folds (groups) | largest fold (bytes) | all folds (bytes) "
        "| parameters and buffers (bytes) | all / parameters and buffers |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(FIXTURES):
        fixture = FIXTURES[name]
        model = xnnfold.prepare_for_xnnpack(fixture.model())
        dynamic = fixture.dynamic_shapes() if fixture.dynamic_shapes is not None else None
        ep = torch.export.export(model, fixture.inputs(), dynamic_shapes=dynamic)
        groups: dict[str, int] = {}
        for node in ep.graph.nodes:
            positions = gemm_positions(node) or ()
            for index in positions:
                result = find_weight_computation(
                    node, index, ep, arg_positions=positions, options=FoldOptions(), budgeted=False
                )
                growth = growth_of(result)
                if growth is not None:
                    groups[growth.group] = growth.added
        if groups:
            total, params = sum(groups.values()), program_bytes(ep)
            lines.append(
                f"| {name} | {len(groups)} | {max(groups.values()):,} | {total:,} "
                f"| {params:,} | {total / params:.1%} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", nargs="+", default=["anti_aliased_block"])
    parser.add_argument("--length", type=int, default=4096, help="samples per call")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20, help="calls per timed repeat")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--survey", action="store_true", help="also list every fixture's growing folds"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = [
        "| fixture | growth_budget | ms/call (median) | NO_GROWTH / this | .pte bytes "
        "| bytes added by folds | GEMMs on portable | max abs diff vs eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in args.fixtures:
        inputs = _inputs(name, args.length)
        lowered = {variant: _lower(name, inputs, budget) for variant, budget in VARIANTS.items()}
        times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for repeat in range(args.repeats):
            order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                times[variant].append(_time(lowered[variant]["program"], inputs, args.calls))
        medians = {variant: statistics.median(t) for variant, t in times.items()}
        for variant in VARIANTS:
            found = lowered[variant]
            lines.append(
                f"| {name} | {variant} | {medians[variant]:.2f} "
                f"| {medians['NO_GROWTH'] / medians[variant]:.2f}x | {found['bytes']:,} "
                f"| {found['growth']:,} | {found['outside']} of {found['gemms']} "
                f"| {found['error']:.2e} |"
            )
    if args.survey:
        lines += ["", *survey()]
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        command = "python " + " ".join(["benchmarks/timing/bench_growth.py", *sys.argv[1:]])
        args.out.write_text(
            "# Growth budget: latency and program bytes\n\n"
            f"Measured with (one thread, interleaved, {args.repeats} repeats of "
            f"{args.calls} calls, torch {torch.__version__}):\n\n"
            f"    {command}\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
