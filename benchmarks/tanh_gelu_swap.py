"""How far a timm architecture's output moves when its tanh GELUs compute exact GELU.

executorch 1.5.1's XNNPACK backend runs a delegated ``gelu(approximate="tanh")`` as exact
GELU (docs/limits.md): this measures, in eager PyTorch, what that swap alone does to an
architecture with random weights, to set beside the sweep's diff of its programs.

    python benchmarks/tanh_gelu_swap.py maxvit_base_tf_224:224 gemma4_vit_167m:64

Each argument is an architecture and the side of its square input; seed 0.
"""

from __future__ import annotations

import argparse
from typing import Any

import timm
import torch
import torch.nn.functional as F


def swap_diff(name: str, side: int) -> tuple[float, float]:
    """The largest output of ``name`` and how far exact GELU in place of tanh GELU moves it."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    x = torch.randn(1, 3, side, side)
    gelu = F.gelu

    def exact(t: torch.Tensor, approximate: str = "none", **_: Any) -> torch.Tensor:
        return gelu(t)

    with torch.no_grad():
        reference = model(x)
        F.gelu = exact  # what the delegate computes; nn.GELU and timm's GELUTanh call it
        try:
            swapped = model(x)
        finally:
            F.gelu = gelu
    return reference.abs().max().item(), (reference - swapped).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="architecture:side, e.g. maxvit_tiny_tf_224:224")
    args = parser.parse_args()
    print("| architecture | input | largest output | moved by exact GELU |")
    print("|---|---|---|---|")
    for spec in args.models:
        name, side = spec.rsplit(":", 1)
        scale, moved = swap_diff(name, int(side))
        print(f"| {name} | {side} x {side} | {scale:.3g} | {moved:.2g} |")


if __name__ == "__main__":
    main()
