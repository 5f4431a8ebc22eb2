"""A tied language model at a realistic vocabulary: bytes, load time and latency.

A ``LlamaForCausalLM`` (random weights, nothing downloaded) with a 32,000 x 512 embedding
that its lm_head shares (``tie_word_embeddings=True``), exported for its logits with a
dynamic sequence length, is lowered with the stock `XnnpackPartitioner` (one `.pte`, the
table twice) and with `XnnpackFoldingPartitioner` (a `.pte` and
``_default_external_constant.ptd``, the table once). Prints the bytes each writes beside
the lower bound (the stock program less one copy of the table), the same model untied
(two tables by design) and, as the control for loading from a ``.ptd``, the stock
program with ``external_constants=True``; then load time (``load_program`` + ``load_method``, from the
files) and latency (``execute`` at one sequence length), the programs alternating
round by round (the control too), medians and ratios, and each program's max abs error against eager.

    python benchmarks/bench_tied.py [--rounds 15] [--length 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from torch import nn

import xnnfold

warnings.filterwarnings("ignore")

VOCAB, HIDDEN = 32_000, 512
CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=1_376,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=256,
)


class Logits(nn.Module):
    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def language_model(*, tied: bool) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    lm = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**CONFIG, tie_word_embeddings=tied)
    ).eval()
    return Logits(lm).eval()


def _example() -> tuple[torch.Tensor]:
    return (torch.randint(0, VOCAB, (1, 16), generator=torch.Generator().manual_seed(0)),)


DYNAMIC = ({1: torch.export.Dim("seq", min=2, max=128)},)


def _export(model: nn.Module) -> Any:
    return torch.export.export(model, _example(), dynamic_shapes=DYNAMIC)


def _write(et: Any, directory: Path) -> tuple[Path, ...]:
    directory.mkdir()
    return xnnfold.save(et, directory / "lm.pte")


def _size(paths: tuple[Path, ...]) -> int:
    return sum(p.stat().st_size for p in paths)


def _loader(paths: tuple[Path, ...]) -> Callable[[], Any]:
    from executorch.runtime import Runtime

    data: Optional[Path] = paths[1] if len(paths) > 1 else None

    def load() -> Any:
        if data is None:
            program = Runtime.get().load_program(paths[0])
        else:
            program = Runtime.get().load_program(paths[0], data_path=str(data))
        return program, program.load_method("forward")

    return load


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--length", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    model = language_model(tied=True)
    table = VOCAB * HIDDEN * 4
    work = Path(tempfile.mkdtemp(prefix="bench_tied-"))
    started = time.perf_counter()
    stock = _write(
        to_edge_transform_and_lower(
            _export(model), partitioner=[XnnpackPartitioner()]
        ).to_executorch(),
        work / "stock",
    )
    stock_lowering = time.perf_counter() - started
    # The control for load time: stock's program with its constants in a .ptd (the
    # table's program copy there, the delegate's in the .pte).
    external = _write(
        to_edge_transform_and_lower(
            _export(model), partitioner=[XnnpackPartitioner()]
        ).to_executorch(ExecutorchBackendConfig(external_constants=True)),
        work / "stock_external",
    )
    started = time.perf_counter()
    edge = xnnfold.lower(model, _example(), dynamic_shapes=DYNAMIC)
    ours = _write(edge.to_executorch(), work / "xnnfold")
    ours_lowering = time.perf_counter() - started
    untied = _write(
        to_edge_transform_and_lower(
            _export(language_model(tied=False)), partitioner=[XnnpackPartitioner()]
        ).to_executorch(),
        work / "untied",
    )
    report = xnnfold.explain(edge)

    print(f"table: {VOCAB} x {HIDDEN} float32 = {table:,} bytes")
    print()
    print("| program | files | bytes | vs stock |")
    print("|---|---|---|---|")
    rows = [
        ("stock XnnpackPartitioner", stock),
        ("stock, external_constants=True", external),
        ("XnnpackFoldingPartitioner", ours),
        ("same model untied (stock)", untied),
    ]
    for name, paths in rows:
        files = " + ".join(f"{p.name} {p.stat().st_size:,}" for p in paths)
        print(f"| {name} | {files} | {_size(paths):,} | {_size(paths) / _size(stock):.3f} |")
    bound = _size(stock) - table
    print(f"| lower bound (stock less one table) | | {bound:,} | {bound / _size(stock):.3f} |")
    print()
    print(f"explain: {report.bytes_saved:,} bytes saved ({[t.fqn for t in report.shared]})")
    print(f"lowering: stock {stock_lowering:.1f} s, xnnfold {ours_lowering:.1f} s")

    loaders = {
        "stock": _loader(stock),
        "stock, external_constants=True": _loader(external),
        "xnnfold": _loader(ours),
    }
    ids = torch.randint(0, VOCAB, (1, args.length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids)
    loads: dict[str, list[float]] = {name: [] for name in loaders}
    for _ in range(args.rounds):
        for name, load in loaders.items():
            started = time.perf_counter()
            loaded = load()
            loads[name].append(time.perf_counter() - started)
            del loaded
    loaded = {name: load() for name, load in loaders.items()}
    errors = {}
    for name, (_, method) in loaded.items():
        (out,) = method.execute([ids])
        errors[name] = (out - expected).abs().max().item()
        method.execute([ids])  # warm-up
    runs: dict[str, list[float]] = {name: [] for name in loaders}
    for _ in range(args.rounds):
        for name, (_, method) in loaded.items():
            started = time.perf_counter()
            method.execute([ids])
            runs[name].append(time.perf_counter() - started)

    print()
    print(f"interleaved, {args.rounds} rounds, sequence length {args.length}, 1 thread:")
    print()
    print("| program | load median ms | latency median ms | max abs error vs eager |")
    print("|---|---|---|---|")
    for name in loaders:
        print(
            f"| {name} | {statistics.median(loads[name]) * 1e3:.2f} | "
            f"{statistics.median(runs[name]) * 1e3:.2f} | {errors[name]:.2e} |"
        )
    load_ratio = statistics.median(loads["xnnfold"]) / statistics.median(loads["stock"])
    run_ratio = statistics.median(runs["xnnfold"]) / statistics.median(runs["stock"])
    print()
    print(f"xnnfold / stock: load {load_ratio:.3f}, latency {run_ratio:.3f}")


if __name__ == "__main__":
    main()
