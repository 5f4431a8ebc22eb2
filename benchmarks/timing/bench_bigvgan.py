"""BigVGAN (bigvgan 2.4.1, base 22 kHz config, random weights): the growth budget on a
model nobody here wrote.

Lowers the model three ways (stock `XnnpackPartitioner`; `XnnpackFoldingPartitioner` with
`growth_budget=NO_GROWTH`; with the default budget), checks each `.pte` against eager
through `executorch.runtime`, and times them interleaved (one thread, medians in ms):

    pip install --no-deps bigvgan==2.4.1 && pip install huggingface_hub
    python benchmarks/timing/bench_bigvgan.py --frames 64 --rounds 5

bigvgan's package imports librosa, matplotlib and scipy for training and plotting only;
the generator does not use them, so this script stands in empty modules for them rather
than installing them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from typing import Any, Callable

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import xnnfold

# bigvgan.utils and bigvgan.meldataset import these at module level; the generator does not
# call them.
UNUSED_IMPORTS = (
    "matplotlib",
    "matplotlib.pylab",
    "librosa",
    "librosa.filters",
    "scipy.io.wavfile",
)

# bigvgan_base_22khz_80band's generator (146 anti-aliased activations, each an upsampling
# and a low-pass convolution over `filter.expand(C, -1, -1)`).
BASE_22KHZ = dict(
    resblock="1",
    num_mels=80,
    upsample_rates=[8, 8, 2, 2],
    upsample_kernel_sizes=[16, 16, 4, 4],
    upsample_initial_channel=512,
    resblock_kernel_sizes=[3, 7, 11],
    resblock_dilation_sizes=[[1, 3, 5]] * 3,
    activation="snakebeta",
    snake_logscale=True,
    use_tanh_at_final=False,
    use_bias_at_final=False,
    use_cuda_kernel=False,
    sampling_rate=22050,
)


def _unused(*args: object, **kwargs: object) -> None:
    """What an empty module's names do: nothing (only matplotlib.use("Agg") is called)."""


def _generator() -> Callable[[], torch.nn.Module]:
    for name in UNUSED_IMPORTS:
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for attribute in ("use", "mel", "write"):
            setattr(module, attribute, _unused)
    from bigvgan.bigvgan import BigVGAN
    from bigvgan.env import AttrDict

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return BigVGAN(AttrDict(BASE_22KHZ)).eval()

    return build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=64, help="mel frames of the input")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed calls each")
    args = parser.parse_args()
    torch.set_num_threads(1)
    build = _generator()
    inputs = (torch.randn(1, 80, args.frames, generator=torch.Generator().manual_seed(1)),)
    with torch.no_grad():
        expected = build()(*inputs)
    variants: dict[str, Callable[[], Any]] = {
        "stock": XnnpackPartitioner,
        "xnnfold, NO_GROWTH": lambda: xnnfold.XnnpackFoldingPartitioner(
            growth_budget=xnnfold.NO_GROWTH, facts=xnnfold.CrossMethodFacts()
        ),
        "xnnfold, default budget": lambda: xnnfold.XnnpackFoldingPartitioner(
            facts=xnnfold.CrossMethodFacts()
        ),
    }
    results: dict[str, dict[str, Any]] = {}
    loaded: dict[str, xnnfold.LoadedProgram] = {}
    for name, partitioner in variants.items():
        model = build() if name == "stock" else xnnfold.prepare_for_xnnpack(build())
        start = time.perf_counter()
        edge = to_edge_transform_and_lower(
            torch.export.export(model, inputs), partitioner=[partitioner()]
        )
        buffer = edge.to_executorch().buffer
        seconds = time.perf_counter() - start
        report = xnnfold.explain(edge)
        loaded[name] = xnnfold.LoadedProgram(buffer, "forward")
        (out,) = loaded[name](list(inputs))
        results[name] = {
            "gemms": len(report.rows),
            "outside": len(report.outside),
            "pte_bytes": len(buffer),
            "lowering_s": round(seconds, 1),
            "max_abs_diff_vs_eager": float((out - expected).abs().max()),
        }
    times: dict[str, list[float]] = {name: [] for name in loaded}
    for _ in range(args.rounds):
        for name, program in loaded.items():
            start = time.perf_counter()
            program(list(inputs))
            times[name].append((time.perf_counter() - start) * 1000)
    for name in loaded:
        results[name]["median_ms"] = round(statistics.median(times[name]), 1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
