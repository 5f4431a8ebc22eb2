"""What computing tanh GELU exactly costs: tanh-GELU models, stock against xnnfold.

executorch 1.5.1's XNNPACK serializer writes ``gelu(approximate="tanh")`` as exact GELU;
xnnfold writes it as ``x * sigmoid(x * (A + B x^2))`` inside the delegate, six XNNPACK
nodes where stock writes one (docs/limits.md). For each model this lowers the same
weights with the stock `XnnpackPartitioner` and with `XnnpackFoldingPartitioner`, runs
both `.pte`s through `executorch.runtime` against eager, and times them interleaved
(``--runs`` calls each after ``--warmup``, medians):

- ``gemma``: a Gemma-style decoder (transformers' `GemmaForCausalLM`, whose default
  activation is ``gelu_pytorch_tanh``), prefill of ``--tokens`` tokens;
- ``siglip``: SigLIP's vision tower (`SiglipVisionModel`, ``gelu_pytorch_tanh``), one
  224 x 224 image;
- ``mbconv``: MaxViT's convolution block alone (1x1 conv, tanh GELU, depthwise 3x3,
  tanh GELU, 1x1 conv), 64 to 256 channels on a 56 x 56 map;
- ``maxvit``: timm's ``maxvit_tiny_tf_224`` (tanh GELU), one 224 x 224 image; needs timm
  (and a torchvision that loads beside torch).

    python benchmarks/timing/bench_tanh_gelu.py --runs 31
    python benchmarks/timing/bench_tanh_gelu.py --models maxvit --runs 31   # a timm venv

Weights are random (seeded): the diffs say how far each program is from eager on them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from typing import Any, Callable

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime

import xnnfold


def _gemma(tokens: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import GemmaConfig, GemmaForCausalLM

    config = GemmaConfig(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        hidden_activation="gelu_pytorch_tanh",
        use_cache=False,
    )

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = GemmaForCausalLM(config)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, use_cache=False).logits

    return Logits(), (torch.randint(0, config.vocab_size, (1, tokens)),)


def _siglip(_: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(
        hidden_size=384,
        intermediate_size=1536,
        num_hidden_layers=6,
        num_attention_heads=6,
        image_size=224,
        patch_size=16,
        hidden_act="gelu_pytorch_tanh",
    )

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = SiglipVisionModel(config)

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=pixels).pooler_output

    return Pooled(), (torch.randn(1, 3, 224, 224),)


def _mbconv(_: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """MaxViT's convolution block shape: 1x1 conv, tanh GELU, depthwise 3x3, tanh GELU,
    1x1 conv, on a 56 x 56 map: the GELUs run in XNNPACK's channels-last region."""

    class MBConv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.expand = torch.nn.Conv2d(64, 256, 1)
            self.depthwise = torch.nn.Conv2d(256, 256, 3, padding=1, groups=256)
            self.project = torch.nn.Conv2d(256, 64, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            gelu = torch.nn.functional.gelu
            hidden = gelu(
                self.depthwise(gelu(self.expand(x), approximate="tanh")), approximate="tanh"
            )
            return x + self.project(hidden)

    return MBConv(), (torch.randn(1, 64, 56, 56),)


def _maxvit(_: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    import timm

    return timm.create_model("maxvit_tiny_tf_224", pretrained=False), (torch.randn(1, 3, 224, 224),)


MODELS: dict[str, Callable[[int], tuple[torch.nn.Module, tuple[Any, ...]]]] = {
    "gemma": _gemma,
    "siglip": _siglip,
    "mbconv": _mbconv,
    "maxvit": _maxvit,
}


def _lower(
    model: torch.nn.Module, inputs: tuple[Any, ...], partitioner: Any
) -> tuple[bytes, float]:
    ep = torch.export.export(model, inputs)
    start = time.perf_counter()
    buffer = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer
    return buffer, time.perf_counter() - start


def measure(name: str, *, runs: int, warmup: int, tokens: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model, inputs = MODELS[name](tokens)
    model.eval()
    with torch.no_grad():
        eager = model(*inputs)
    scale = eager.abs().max().item()
    runtime = Runtime.get()
    programs: dict[str, Any] = {}
    methods: dict[str, Any] = {}
    row: dict[str, Any] = {"model": name, "scale": scale}
    for variant, partitioner in (
        ("stock", XnnpackPartitioner()),
        ("xnnfold", xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())),
    ):
        buffer, seconds = _lower(model, inputs, partitioner)
        # A Method borrows from its Program: keep both.
        programs[variant] = runtime.load_program(buffer)
        methods[variant] = programs[variant].load_method("forward")
        (out,) = methods[variant].execute(list(inputs))
        row[f"{variant} diff"] = (out - eager).abs().max().item()
        row[f"{variant} bytes"] = len(buffer)
        row[f"{variant} lowering s"] = seconds
    times: dict[str, list[float]] = {variant: [] for variant in methods}
    for i in range(warmup + runs):
        for variant, method in methods.items():
            start = time.perf_counter()
            method.execute(list(inputs))
            if i >= warmup:
                times[variant].append(time.perf_counter() - start)
    for variant, samples in times.items():
        row[f"{variant} ms"] = statistics.median(samples) * 1e3
    row["xnnfold / stock"] = row["xnnfold ms"] / row["stock ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", choices=sorted(MODELS), default=["gemma", "siglip", "mbconv"]
    )
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64, help="the Gemma prefill's length")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"load average before: {os.getloadavg()[0]:.2f}; runs {args.runs}, warm-up {args.warmup}")
    print(
        "| model | stock ms | xnnfold ms | xnnfold / stock | stock diff | xnnfold diff "
        "| output scale | stock bytes | xnnfold bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        r = measure(name, runs=args.runs, warmup=args.warmup, tokens=args.tokens)
        print(
            f"| {name} | {r['stock ms']:.2f} | {r['xnnfold ms']:.2f} | {r['xnnfold / stock']:.3f} "
            f"| {r['stock diff']:.3g} | {r['xnnfold diff']:.3g} | {r['scale']:.3g} "
            f"| {r['stock bytes']:,} | {r['xnnfold bytes']:,} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
