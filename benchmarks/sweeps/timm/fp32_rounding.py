"""How far a timm architecture's programs lie from its true output, beside eager fp32.

A program's diff from eager fp32 mixes two things: what the program computes differently
(exact GELU for tanh GELU, say) and fp32 rounding, which a deep model amplifies and which
XNNPACK's kernels (other summation orders, fused multiply-adds) round differently from
PyTorch's. The same model in float64 separates them: for the stock and the xnnfold
program, and for eager fp32 itself, this prints the max abs diff from the float64 output
(same weights, same input, built and fed as the timm sweep, `benchmarks/sweeps/timm`,
builds and feeds it), and for eager fp32 run channels-last (PyTorch's other convolution
kernels: the same arithmetic in another order). A program as far from float64 as eager
fp32 is, one way or the other, computes what eager computes up to fp32 rounding.

    python -m benchmarks.sweeps.timm.fp32_rounding maxvit_base_tf_224 gemma4_vit_167m
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import xnnfold
from benchmarks.sweeps.timm.library import Timm


def _program_output(model: torch.nn.Module, inputs: dict[str, Any], partitioner: Any) -> Any:
    ep = torch.export.export(model, (), dict(inputs))
    buffer = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch().buffer
    return xnnfold.run_pte(buffer, list(inputs.values()))[0]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def distances(name: str, *, lower: bool = True) -> dict[str, float]:
    """``name``'s largest output, and each output's max abs diff from the float64 one and
    from eager fp32 (the programs' only where ``lower``)."""
    library = Timm()
    group = dict((n, g) for g, n in library.discover())[name]
    built = library.build(group, name)
    with torch.no_grad():
        eager = built.model(**built.inputs)
        wide = copy.deepcopy(built.model).double()
        truth = wide(**{k: v.double() for k, v in built.inputs.items()})
        # The same fp32 arithmetic in another order: PyTorch's channels-last kernels.
        other = copy.deepcopy(built.model).to(memory_format=torch.channels_last)
        reordered = other(
            **{k: v.contiguous(memory_format=torch.channels_last) for k, v in built.inputs.items()}
        )
    found = {
        "scale": eager.abs().max().item(),
        "eager fp32 vs fp64": _max_diff(eager, truth),
        "eager fp32 channels-last vs fp64": _max_diff(reordered, truth),
    }
    lowerings = (
        ("stock", XnnpackPartitioner()),
        ("xnnfold", xnnfold.XnnpackFoldingPartitioner(facts=xnnfold.CrossMethodFacts())),
    )
    for label, partitioner in lowerings if lower else ():
        out = _program_output(built.model, built.inputs, partitioner)
        found[f"{label} vs fp64"] = _max_diff(out, truth)
        found[f"{label} vs eager fp32"] = _max_diff(out, eager)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="timm architectures, e.g. maxvit_tiny_tf_224")
    parser.add_argument("--eager-only", action="store_true", help="lower nothing")
    args = parser.parse_args()
    columns = [
        "scale",
        "eager fp32 vs fp64",
        "eager fp32 channels-last vs fp64",
        "stock vs fp64",
        "xnnfold vs fp64",
        "stock vs eager fp32",
        "xnnfold vs eager fp32",
    ]
    print("| architecture | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in args.models:
        found = distances(name, lower=not args.eager_only)
        cells = [f"{found[c]:.3g}" if c in found else "—" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
