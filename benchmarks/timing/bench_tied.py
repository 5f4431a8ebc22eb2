"""A tied language model at a realistic vocabulary: bytes, load time and latency.

A ``LlamaForCausalLM`` (random weights, nothing downloaded) with a 32,000 x 512 embedding
that its lm_head shares (``tie_word_embeddings=True``), exported for its logits with a
dynamic sequence length, is lowered with the stock `XnnpackPartitioner` (one `.pte`, the
table twice) and with `XnnpackFoldingPartitioner(tie_tables=True)` (``lm.pte`` and
``lm.ptd``, the table once). Prints the bytes each writes beside
the lower bound (the stock program less one copy of the table), the same model untied
(two tables by design) and, as the control for loading from a ``.ptd``, the stock
program with ``external_constants=True``; then load time (``load_program`` +
``load_method``, from the files) and latency (``execute`` at one sequence length), the
programs alternating round by round, the order reversed every other round, medians,
minimums and ratios, and each program's max abs error against eager.

    python benchmarks/timing/bench_tied.py [--rounds 15] [--length 32]
    python benchmarks/timing/bench_tied.py --files /tmp/bench_tied-XXXX --rounds 61  # time only
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


VARIANTS = ("stock", "stock_external", "xnnfold", "untied")
TIMED = {
    "stock": "stock",
    "stock_external": "stock, external_constants=True",
    "xnnfold": "xnnfold",
}


def _saved(work: Path) -> dict[str, tuple[Path, ...]]:
    """The files a previous run wrote under ``work``, by variant."""
    return {
        variant: tuple(sorted((work / variant).iterdir(), key=lambda p: p.suffix != ".pte"))
        for variant in VARIANTS
    }


def _lower_all(model: nn.Module, work: Path) -> dict[str, tuple[Path, ...]]:
    """Lower and write every variant under ``work``; print the bytes table."""
    table = VOCAB * HIDDEN * 4
    started = time.perf_counter()
    paths = {
        "stock": _write(
            to_edge_transform_and_lower(
                _export(model), partitioner=[XnnpackPartitioner()]
            ).to_executorch(),
            work / "stock",
        )
    }
    stock_lowering = time.perf_counter() - started
    # The control for loading from a .ptd: stock's program with its constants there (the
    # table's program copy in the .ptd, the delegate's in the .pte).
    paths["stock_external"] = _write(
        to_edge_transform_and_lower(
            _export(model), partitioner=[XnnpackPartitioner()]
        ).to_executorch(ExecutorchBackendConfig(external_constants=True)),
        work / "stock_external",
    )
    started = time.perf_counter()
    edge = xnnfold.lower(model, _example(), dynamic_shapes=DYNAMIC, tie_tables=True)
    paths["xnnfold"] = _write(edge.to_executorch(), work / "xnnfold")
    ours_lowering = time.perf_counter() - started
    paths["untied"] = _write(
        to_edge_transform_and_lower(
            _export(language_model(tied=False)), partitioner=[XnnpackPartitioner()]
        ).to_executorch(),
        work / "untied",
    )
    report = xnnfold.explain(edge)

    stock = _size(paths["stock"])
    print(f"table: {VOCAB} x {HIDDEN} float32 = {table:,} bytes; files in {work}")
    print()
    print("| program | files | bytes | vs stock |")
    print("|---|---|---|---|")
    names = {
        "stock": "stock XnnpackPartitioner",
        "stock_external": "stock, external_constants=True",
        "xnnfold": "XnnpackFoldingPartitioner(tie_tables=True)",
        "untied": "same model untied (stock)",
    }
    for variant, name in names.items():
        files = " + ".join(f"{p.name} {p.stat().st_size:,}" for p in paths[variant])
        size = _size(paths[variant])
        print(f"| {name} | {files} | {size:,} | {size / stock:.3f} |")
    bound = stock - table
    print(f"| lower bound (stock less one table) | | {bound:,} | {bound / stock:.3f} |")
    print()
    print(f"explain: {report.bytes_saved:,} bytes saved ({[t.fqn for t in report.shared]})")
    print(f"lowering: stock {stock_lowering:.1f} s, xnnfold {ours_lowering:.1f} s")
    return paths


def _time(
    model: nn.Module, paths: dict[str, tuple[Path, ...]], *, rounds: int, length: int
) -> None:
    """Load and execute the programs round by round, the order reversed every other
    round; print medians, minimums, ratios and each program's error against eager."""
    loaders = {TIMED[v]: _loader(paths[v]) for v in TIMED}
    order = list(loaders)
    ids = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids)
    loads: dict[str, list[float]] = {name: [] for name in loaders}
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            loaded = loaders[name]()
            loads[name].append(time.perf_counter() - started)
            del loaded
    methods = {name: load() for name, load in loaders.items()}
    errors = {}
    for name, (_, method) in methods.items():
        (out,) = method.execute([ids])
        errors[name] = (out - expected).abs().max().item()
        method.execute([ids])  # warm-up
    runs: dict[str, list[float]] = {name: [] for name in loaders}
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            methods[name][1].execute([ids])
            runs[name].append(time.perf_counter() - started)

    print()
    print(f"interleaved, {rounds} rounds, sequence length {length}, 1 thread:")
    print()
    print(
        "| program | load median ms | load min ms | latency median ms | latency min ms | max abs error vs eager |"
    )
    print("|---|---|---|---|---|---|")
    for name in loaders:
        print(
            f"| {name} | {statistics.median(loads[name]) * 1e3:.2f} | "
            f"{min(loads[name]) * 1e3:.2f} | {statistics.median(runs[name]) * 1e3:.2f} | "
            f"{min(runs[name]) * 1e3:.2f} | {errors[name]:.2e} |"
        )
    ours, stock = "xnnfold", "stock"
    print()
    print(
        "xnnfold / stock: load median "
        f"{statistics.median(loads[ours]) / statistics.median(loads[stock]):.3f}, min "
        f"{min(loads[ours]) / min(loads[stock]):.3f}; latency median "
        f"{statistics.median(runs[ours]) / statistics.median(runs[stock]):.3f}, min "
        f"{min(runs[ours]) / min(runs[stock]):.3f}"
    )


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument(
        "--files",
        type=Path,
        help="time the programs a previous run wrote in this directory, without lowering",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = language_model(tied=True)
    if args.files is not None:
        paths = _saved(args.files)
    else:
        paths = _lower_all(model, Path(tempfile.mkdtemp(prefix="bench_tied-")))
    _time(model, paths, rounds=args.rounds, length=args.length)


if __name__ == "__main__":
    main()
