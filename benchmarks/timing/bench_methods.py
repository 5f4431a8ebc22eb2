"""Program size when two methods share a table: one looks it up, one multiplies by it.

Method ``embed`` is ``self.emb(ids)``, method ``logits`` is ``x @ self.emb.weight.t()``
(one ``nn.Embedding(1024, 64)``). Lowered with the stock partitioner, with one
`XnnpackFoldingPartitioner` for both methods, and with one per method; prints the `.pte`
bytes, where the mm runs, and each method's max abs error against eager (through
executorch.runtime).

    python benchmarks/timing/bench_methods.py
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch import nn

import xnnfold

warnings.filterwarnings("ignore")


class Table(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(1024, 64)


class Embed(nn.Module):
    def __init__(self, table: Table) -> None:
        super().__init__()
        self.table = table

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table.emb(ids)


class Logits(Embed):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x @ self.table.emb.weight.t()


def _one_per_method() -> dict[str, list[Any]]:
    # The two methods' partitioners share one lowering's facts.
    facts = xnnfold.CrossMethodFacts()
    return {
        "embed": [xnnfold.XnnpackFoldingPartitioner(facts=facts)],
        "logits": [xnnfold.XnnpackFoldingPartitioner(facts=facts)],
    }


VARIANTS: dict[str, Callable[[], Any]] = {
    "stock": lambda: [XnnpackPartitioner()],
    "xnnfold, one partitioner": lambda: [
        xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())
    ],
    "xnnfold, one per method": _one_per_method,
}


def main() -> None:
    table = Table().eval()
    modules = {"embed": Embed(table).eval(), "logits": Logits(table).eval()}
    inputs = {"embed": (torch.randint(0, 1024, (1, 5)),), "logits": (torch.randn(2, 64),)}
    print("| variant | .pte bytes | mm runs in | max abs error embed / logits |")
    print("|---|---|---|---|")
    for name, partitioner in VARIANTS.items():
        programs = {k: torch.export.export(m, inputs[k]) for k, m in modules.items()}
        edge = to_edge_transform_and_lower(programs, partitioner=partitioner())
        buffer = edge.to_executorch().buffer
        errors = [
            float((xnnfold.run_pte(buffer, inputs[k], k)[0] - modules[k](*inputs[k])).abs().max())
            for k in modules
        ]
        (mm,) = [r for r in xnnfold.explain(edge).rows if r.op == "mm"]
        where = "XNNPACK (run-time weight)" if mm.delegated else "portable"
        print(f"| {name} | {len(buffer):,} | {where} | {errors[0]:.2g} / {errors[1]:.2g} |")


if __name__ == "__main__":
    main()
