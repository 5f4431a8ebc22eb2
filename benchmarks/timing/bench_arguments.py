"""What the stock partitioner and xnnfold compute for addmm arguments XNNPACK has no slot for.

XNNPACK's fully-connected op has no ``beta``/``alpha`` and adds one bias value per output
channel. For each case this lowers ``torch.addmm(b, x, W, beta=..., alpha=...)`` with the
stock `XnnpackPartitioner` and with `XnnpackFoldingPartitioner`, runs both `.pte` files
through executorch.runtime, and prints where the addmm ran and the max abs error against
eager (outputs are O(10)).

    python benchmarks/timing/bench_arguments.py
"""

from __future__ import annotations

import warnings

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold

warnings.filterwarnings("ignore")


class Addmm(nn.Module):
    def __init__(
        self, *, beta: float, alpha: float, computed: bool, bias_shape: tuple[int, ...]
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(16, 8, generator=generator))
        self.bias = nn.Parameter(torch.randn(bias_shape, generator=generator))
        self.beta, self.alpha, self.computed = beta, alpha, computed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight * 1.5 if self.computed else self.weight
        return torch.addmm(self.bias, x, weight, beta=self.beta, alpha=self.alpha)


CASES = [
    ("beta=0.5 alpha=2, parameter W", dict(beta=0.5, alpha=2.0, computed=False, bias_shape=(8,))),
    ("beta=0.5 alpha=2, W = v * 1.5", dict(beta=0.5, alpha=2.0, computed=True, bias_shape=(8,))),
    ("bias of shape (4, 8)", dict(beta=1.0, alpha=1.0, computed=False, bias_shape=(4, 8))),
    ("bias of shape (4, 1)", dict(beta=1.0, alpha=1.0, computed=False, bias_shape=(4, 1))),
    ("bias of shape ()", dict(beta=1.0, alpha=1.0, computed=False, bias_shape=())),
]


def main() -> None:
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    print(
        "| case | stock: addmm runs in | stock max abs error | xnnfold: addmm runs in | xnnfold max abs error |"
    )
    print("|---|---|---|---|---|")
    for name, kwargs in CASES:
        model = Addmm(**kwargs).eval()
        cells = []
        for partitioner in (
            XnnpackPartitioner(),
            xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts()),
        ):
            edge = to_edge_transform_and_lower(
                torch.export.export(model, (x,)), partitioner=[partitioner]
            )
            out = xnnfold.run_pte(edge.to_executorch().buffer, (x,))[0]
            where = "portable" if xnnfold.summarize(edge).outside_ops.get("addmm") else "XNNPACK"
            cells += [where, f"{float((out - model(x)).abs().max()):.3g}"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
