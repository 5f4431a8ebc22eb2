"""Latency of a GEMM whose weight is per sample: stock (portable) against xnnfold (delegated).

The weight is ``v * s``: a parameter ``v`` [OUT, IN] scaled per output channel by an
input ``s`` [OUT, 1], as ``F.linear(x, v * s, b)``, ``torch.addmm(b, x, (v * s).t())``
and ``x @ (v * s).t()``. The stock partitioner leaves the GEMM on the portable kernels;
xnnfold delegates it, XNNPACK's fully-connected op reading the weight at run time. Both
programs are loaded once, checked against eager through executorch.runtime, then called
alternately (``--calls`` each); prints the medians and stock / xnnfold. ``--threads``
sets the runtime's threadpool (default: as executorch sets it, one thread per core): the
portable GEMM runs on one thread, XNNPACK on all of them, and on a machine with more
busy processes than cores a thread that waits for another costs a time slice.

    python benchmarks/timing/bench_per_sample.py [--calls 41] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any, Callable

import torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime
from torch import nn

import xnnfold

warnings.filterwarnings("ignore")

GEMMS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "linear": lambda x, w, b: F.linear(x, w, b),
    "addmm": lambda x, w, b: torch.addmm(b, x, w.t()),
    "mm": lambda x, w, b: x @ w.t(),
}

# (IN, OUT, batch)
SIZES = [(64, 48, 1), (256, 256, 1), (256, 256, 8), (1024, 1024, 1), (1024, 1024, 16)]


class PerSample(nn.Module):
    def __init__(self, gemm: str, features: int, outputs: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.v = nn.Parameter(torch.randn(outputs, features, generator=generator))
        self.b = nn.Parameter(torch.randn(outputs, generator=generator))
        self.gemm = GEMMS[gemm]

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.gemm(x, self.v * s, self.b)


def _loaded(model: nn.Module, inputs: tuple[torch.Tensor, ...], partitioner: Any) -> Any:
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), partitioner=[partitioner]
    )
    # The Method borrows from its Program: keep both.
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    return program, program.load_method("forward"), xnnfold.summarize(edge).fully_delegated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=41)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    calls = args.calls
    if args.threads is not None:
        portable_lib._unsafe_reset_threadpool(args.threads)
    threads = portable_lib._threadpool_get_thread_count()
    print(f"executorch.runtime, {threads} thread(s), {calls} calls each, interleaved; ms")
    print("| GEMM | IN x OUT | batch | stock | xnnfold | stock / xnnfold | max abs error |")
    print("|---|---|---|---|---|---|---|")
    for gemm in GEMMS:
        for features, outputs, batch in SIZES:
            model = PerSample(gemm, features, outputs).eval()
            generator = torch.Generator().manual_seed(1)
            inputs = (
                torch.randn(batch, features, generator=generator),
                torch.rand(outputs, 1, generator=generator) + 0.5,
            )
            variants = {
                "stock": _loaded(model, inputs, XnnpackPartitioner()),
                "xnnfold": _loaded(
                    model,
                    inputs,
                    xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts()),
                ),
            }
            assert not variants["stock"][2] and variants["xnnfold"][2], (gemm, features)
            with torch.no_grad():
                expected = model(*inputs)
            errors = {
                name: float((method.execute(list(inputs))[0] - expected).abs().max())
                for name, (_, method, _) in variants.items()
            }
            times: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(calls):
                for name, (_, method, _) in variants.items():
                    start = time.perf_counter()
                    method.execute(list(inputs))
                    times[name].append(time.perf_counter() - start)
            stock, ours = (statistics.median(times[n]) * 1e3 for n in ("stock", "xnnfold"))
            print(
                f"| {gemm} | {features} x {outputs} | {batch} | {stock:.4f} | {ours:.4f} | "
                f"{stock / ours:.2f}x | {errors['stock']:.1e} / {errors['xnnfold']:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
