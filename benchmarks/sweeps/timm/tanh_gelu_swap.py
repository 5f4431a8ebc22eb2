"""How far a timm architecture's output moves when its tanh GELUs compute exact GELU.

executorch 1.5.1's XNNPACK backend runs a delegated ``gelu(approximate="tanh")`` as exact
GELU (docs/limits.md). This measures, in eager PyTorch, what that swap alone does to each
architecture built and fed as the timm sweep (`benchmarks/sweeps/timm`) builds and feeds
it (the same weights and input), to set beside the sweep's diff of its programs:

    python -m benchmarks.sweeps.timm.tanh_gelu_swap maxvit_base_tf_224 gemma4_vit_167m
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.sweeps.timm.library import Timm


def swap_diff(name: str) -> tuple[float, float]:
    """The largest output of ``name`` and how far exact GELU in place of tanh GELU moves it."""
    library = Timm()
    group = dict((n, g) for g, n in library.discover())[name]
    built = library.build(group, name)
    gelu = F.gelu

    def exact(t: torch.Tensor, approximate: str = "none", **_: Any) -> torch.Tensor:
        return gelu(t)

    with torch.no_grad():
        reference = built.model(**built.inputs)
        F.gelu = exact  # what the delegate computes; nn.GELU and timm's GELUTanh call it
        try:
            swapped = built.model(**built.inputs)
        finally:
            F.gelu = gelu
    return reference.abs().max().item(), (reference - swapped).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="timm architectures, e.g. maxvit_tiny_tf_224")
    args = parser.parse_args()
    print("| architecture | largest output | moved by exact GELU |")
    print("|---|---|---|")
    for name in args.models:
        scale, moved = swap_diff(name)
        print(f"| {name} | {scale:.3g} | {moved:.3g} |")


if __name__ == "__main__":
    main()
