"""Lowering cost of a weight computed by a long chain: linear in its length.

A linear whose weight goes through ``steps`` elementwise steps (``w = w * 1.0001 +
0.0001``, two nodes a step) is exported once per length, then lowered with
`XnnpackFoldingPartitioner` and with the stock `XnnpackPartitioner`, interleaved in one
process (the order alternates per repeat). Reports median CPU seconds of
``to_edge_transform_and_lower(...).to_executorch()`` per length and variant, the cost per
node, and the growth of the per-node cost from the shortest to the longest chain (1.0 =
linear). The stock program of a long chain delegates the chain's elementwise ops and can
exceed XNNPACK's 4096 external values, so it is timed, not run; xnnfold's is run against
eager.

    python benchmarks/timing/bench_chain.py --steps 250 500 1000 2500 --repeats 3 --stock-max-steps 1000
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import xnnfold
from xnnfold.fixtures import ChainedWeight

warnings.filterwarnings("ignore")
VARIANTS = ("xnnfold", "stock")


def _lower_seconds(ep: torch.export.ExportedProgram, variant: str) -> tuple[float, bytes]:
    partitioner = (
        xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())
        if variant == "xnnfold"
        else XnnpackPartitioner()
    )
    start = time.process_time()
    buffer = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer
    return time.process_time() - start, buffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[250, 500, 1000, 2500])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--stock-max-steps",
        type=int,
        default=None,
        help="time the stock partitioner only up to this length (its "
        "lowering of thousands of nodes takes minutes)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("chain_results.md"))
    args = parser.parse_args()
    x = torch.randn(2, 16)
    rows = []
    for steps in args.steps:
        model = ChainedWeight(steps).eval()
        ep = torch.export.export(model, (x,))
        nodes = sum(1 for n in ep.graph.nodes if n.op == "call_function")
        variants: tuple[str, ...] = VARIANTS
        if args.stock_max_steps is not None and steps > args.stock_max_steps:
            variants = ("xnnfold",)
        times: dict[str, list[float]] = {v: [] for v in variants}
        for repeat in range(args.repeats):
            order = variants if repeat % 2 == 0 else variants[::-1]
            for variant in order:
                seconds, buffer = _lower_seconds(ep, variant)
                times[variant].append(seconds)
                if variant == "xnnfold":
                    out = xnnfold.run_pte(buffer, (x,))[0]
                    error = float((out - model(x)).abs().max())
        medians = {v: statistics.median(t) for v, t in times.items()}
        rows.append((steps, nodes, medians, error))
    lines = [
        "| steps | nodes | xnnfold (s) | stock (s) | xnnfold ms/node | stock ms/node | xnnfold / stock | max abs diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for steps, nodes, m, error in rows:
        stock = m.get("stock")
        lines.append(
            f"| {steps} | {nodes} | {m['xnnfold']:.2f} | "
            + (f"{stock:.2f}" if stock else "not timed")
            + f" | {1000 * m['xnnfold'] / nodes:.2f} | "
            + (f"{1000 * stock / nodes:.2f} | {m['xnnfold'] / stock:.3f}" if stock else "- | -")
            + f" | {error:.2e} |"
        )
    for variant in VARIANTS:
        timed = [row for row in rows if variant in row[2]]
        if len(timed) > 1:
            a, b = timed[0], timed[-1]
            growth = (b[2][variant] / b[1]) / (a[2][variant] / a[1])
            lines.append(f"\nper-node cost growth {a[0]} -> {b[0]} steps, {variant}: {growth:.3f}")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
