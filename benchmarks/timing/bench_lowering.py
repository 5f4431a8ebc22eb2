"""What xnnfold costs at lowering time, measured side by side with the stock partitioner.

The search for computed weights must not grow faster than the graph, and the fold must be
cheap. Three cases, each lowered by every variant in one process, the variants interleaved
in balanced order (A B, B A, ...) so that drift and machine load hit all of them alike:

(a) a 24-layer transformer encoder with hand-written attention (bmm/matmul on activations,
    linears, no computed weights): stock vs xnnfold (target: ratio <= 1.10);
(b) a chain of weight_norm Conv1d at 50/100/150/200 layers: xnnfold's time per layer
    (target: roughly constant; judged as no growth, the per-layer time at 200 layers at
    most 1.25x that at 50) and the marginal time per added layer between sizes (constant
    when lowering is linear), hand-folded + stock for reference;
(c) a HiFi-GAN-style generator (``hifigan_generator`` from xnnfold.fixtures when present,
    else a local one): xnnfold on the parametrized model vs stock on the hand-folded twin
    (target: ratio <= 1.2), and xnnfold with ``keep_decomposition_filter=True`` beside
    them, to show what the decomposition shortcut saves (the programs must be identical).

What is timed: ``to_edge_transform_and_lower(...).to_executorch()``, the part a partitioner
affects. ``torch.export`` runs fresh before every lowering, untimed (reported apart): it does
not depend on the partitioner. Each lowering records wall time and this process's CPU time;
the targets are judged on CPU time, which other processes on a shared machine inflate much
less than wall time (both are in the table). Every variant's last program is run once through
executorch.runtime against eager, untimed.

    python benchmarks/timing/bench_lowering.py                # full: writes benchmarks/timing/lowering_results.md
    python benchmarks/timing/bench_lowering.py --quick        # smaller graphs, 2 repeats, < ~3 min
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import math
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from xnnfold import CrossMethodFacts, prepare_for_xnnpack, run_pte, XnnpackFoldingPartitioner
from xnnfold.fixtures import FIXTURES, strip_parametrizations

# Targets from issue 3 ("Cost").
MAX_ENCODER_RATIO = 1.10
MAX_CHAIN_PER_LAYER_GROWTH = 1.25
MAX_HIFIGAN_RATIO = 1.20

SEED = 20261130
STOCK = "stock"
XNNFOLD = "xnnfold"
HAND_FOLDED = "hand-folded + stock"
XNNFOLD_FILTER = "xnnfold, keep_decomposition_filter=True"
CASES = ("encoder", "chain", "hifigan")


# ---------------------------------------------------------------------------------------
# Models.


class Attention(nn.Module):
    """Multi-head self-attention written out: 3-D bmm for the scores, 4-D matmul for the
    values, both on activations (never a weight), so neither can be folded."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        head_dim = dim // self.heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, head_dim).transpose(1, 2)

        q = heads(self.q(x)).reshape(batch * self.heads, length, head_dim)
        k = heads(self.k(x)).reshape(batch * self.heads, length, head_dim)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(head_dim)
        probs = scores.softmax(-1).view(batch, self.heads, length, length)
        y = torch.matmul(probs, heads(self.v(x)))
        return self.out(y.transpose(1, 2).reshape(batch, length, dim))


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = Attention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 4 * dim)
        self.ff2 = nn.Linear(4 * dim, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, layers: int, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class WeightNormChain(nn.Module):
    """``layers`` weight_norm Conv1d, each followed by a leaky ReLU."""

    def __init__(self, layers: int, channels: int = 16) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, 3, padding=1)) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = nn.functional.leaky_relu(conv(x), 0.1)
        return x


class LocalResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            weight_norm(
                nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2)
            )
            for d in (1, 3, 5)
        )
        self.convs2 = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2))
            for _ in range(3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(nn.functional.leaky_relu(c1(nn.functional.leaky_relu(x, 0.1)), 0.1))
        return x


class LocalHiFiGAN(nn.Module):
    """Fallback HiFi-GAN-style generator: 1 + 2 upsamplers + 2 x 3 x 6 + 1 = 40 convs."""

    def __init__(self, mels: int = 16, channels: int = 64) -> None:
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(mels, channels, 7, padding=3))
        self.ups = nn.ModuleList()
        self.blocks = nn.ModuleList()
        for i in range(2):
            c_in, c_out = channels // 2**i, channels // 2 ** (i + 1)
            self.ups.append(weight_norm(nn.ConvTranspose1d(c_in, c_out, 8, stride=4, padding=2)))
            self.blocks.append(nn.ModuleList(LocalResBlock(c_out, k) for k in (3, 7, 11)))
        self.post = weight_norm(nn.Conv1d(channels // 4, 1, 7, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for up, blocks in zip(self.ups, self.blocks):
            x = up(nn.functional.leaky_relu(x, 0.1))
            x = sum(block(x) for block in blocks) / len(blocks)
        return torch.tanh(self.post(nn.functional.leaky_relu(x)))


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(SEED)
    return build().eval()


# ---------------------------------------------------------------------------------------
# Measurement.


@dataclass
class Variant:
    """One way to lower one model."""

    name: str
    build: Callable[[], nn.Module]  # a fresh model (export consumes nothing, but be safe)
    partitioner: Callable[[], Partitioner]
    inputs: tuple[torch.Tensor, ...]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    export: list[float] = field(default_factory=list)
    pte: bytes = b""
    max_abs_diff: float = float("nan")

    def lower_once(self) -> None:
        model = self.build()
        start = time.perf_counter()
        ep = torch.export.export(model, self.inputs)
        self.export.append(time.perf_counter() - start)
        partitioner = self.partitioner()
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        program = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch()
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)
        self.pte = program.buffer

    def check(self) -> None:
        """Run the last program once through executorch.runtime against eager."""
        with torch.no_grad():
            expected = self.build()(*self.inputs)
        (actual,) = run_pte(self.pte, self.inputs)
        self.max_abs_diff = float((actual - expected).abs().max())

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpu)

    @property
    def wall_s(self) -> float:
        return statistics.median(self.wall)

    @property
    def export_s(self) -> float:
        return statistics.median(self.export)


def balanced_orders(count: int, repeats: int) -> list[tuple[int, ...]]:
    """``repeats`` orders of ``count`` variants, cycling through every permutation so each
    variant runs in each position equally often (A B, B A for two)."""
    perms = list(itertools.permutations(range(count)))
    return [perms[i % len(perms)] for i in range(repeats)]


def measure(variants: list[Variant], repeats: int, say: Callable[[str], None]) -> None:
    for r, order in enumerate(balanced_orders(len(variants), repeats)):
        for i in order:
            variants[i].lower_once()
            say(
                f"  round {r + 1}/{repeats} {variants[i].name}: "
                f"{variants[i].cpu[-1]:.2f} s CPU, {variants[i].wall[-1]:.2f} s wall"
            )
    for v in variants:
        v.check()


def stock() -> Partitioner:
    return XnnpackPartitioner()


def folding() -> Partitioner:
    return XnnpackFoldingPartitioner(facts=CrossMethodFacts())


def folding_with_filter() -> Partitioner:
    # Without the decomposition shortcut: shows how much of the gap it closes.
    return XnnpackFoldingPartitioner(keep_decomposition_filter=True, facts=CrossMethodFacts())


def hifigan_source() -> tuple[
    str, Callable[[], nn.Module], Callable[[], nn.Module], tuple[torch.Tensor, ...]
]:
    fixture = FIXTURES.get("hifigan_generator")
    if fixture is not None:
        return (
            "xnnfold.fixtures `hifigan_generator`",
            fixture.model,
            fixture.hand_folded,
            fixture.inputs(),
        )
    torch.manual_seed(SEED + 1)
    return (
        "local LocalHiFiGAN (no `hifigan_generator` fixture found)",
        lambda: _seeded(LocalHiFiGAN),
        lambda: strip_parametrizations(_seeded(LocalHiFiGAN)),
        (torch.randn(1, 16, 32),),
    )


def warm_up() -> None:
    """The first lowering in a process pays one-off imports and registrations."""
    for partitioner in (stock, folding):
        model = prepare_for_xnnpack(_seeded(lambda: WeightNormChain(2)))
        ep = torch.export.export(model, (torch.randn(1, 16, 32),))
        to_edge_transform_and_lower(ep, partitioner=[partitioner()]).to_executorch()


def row(v: Variant, layers: Optional[int] = None) -> str:
    per_layer = f" {v.cpu_s / layers * 1e3:,.1f} |" if layers else ""
    return (
        f"| {v.name} | {v.cpu_s:,.2f} | {v.wall_s:,.2f} |{per_layer} {v.export_s:,.2f} | "
        f"{len(v.cpu)} | {len(v.pte):,} | {v.max_abs_diff:.2e} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed lowerings per variant (default 3; 2 with --quick)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="6-layer encoder, 20/40/60-layer chains, 2 repeats"
    )
    parser.add_argument(
        "--cases", nargs="+", choices=CASES, default=list(CASES), help="which cases to run"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("lowering_results.md"))
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    if repeats < 1:
        parser.error("--repeats must be >= 1")
    encoder_layers = 6 if args.quick else 24
    chain_sizes = (20, 40, 60) if args.quick else (50, 100, 150, 200)

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # executorch logs every declined node
    start = time.perf_counter()
    load_before = os.getloadavg()

    def say(message: str) -> None:
        print(f"{time.perf_counter() - start:7.1f}s {message}", file=sys.stderr, flush=True)

    say("warm-up")
    warm_up()
    failures: list[str] = []
    lines = [
        "# xnnfold lowering cost",
        "",
        f"`python benchmarks/timing/bench_lowering.py{' --quick' if args.quick else ''} --repeats {repeats}"
        f"{'' if args.cases == list(CASES) else ' --cases ' + ' '.join(args.cases)}` "
        f"on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}. "
        "Timed: `to_edge_transform_and_lower(...).to_executorch()`; `torch.export` runs before "
        "each lowering, untimed (its median is the export column). Medians over the repeats; "
        "variants interleaved in balanced order. Targets are judged on CPU time (this process), "
        "which load from other processes inflates much less than wall time.",
        "",
    ]

    if "encoder" in args.cases:
        encoder_case(encoder_layers, repeats, lines, failures, say)
    if "chain" in args.cases:
        chain_case(chain_sizes, repeats, lines, failures, say)
    if "hifigan" in args.cases:
        hifigan_case(repeats, lines, failures, say)

    load_after = os.getloadavg()
    lines += [
        f"Load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"{time.perf_counter() - start:.0f} s in all.",
        "",
        "Targets missed: " + ("; ".join(failures) if failures else "none"),
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 1 if failures else 0


def encoder_case(
    encoder_layers: int,
    repeats: int,
    lines: list[str],
    failures: list[str],
    say: Callable[[str], None],
) -> None:
    """(a) encoder, no computed weights."""
    say(f"(a) {encoder_layers}-layer encoder")
    x = (torch.randn(1, 16, 64),)
    enc = [
        Variant(STOCK, lambda: _seeded(lambda: Encoder(encoder_layers)), stock, x),
        Variant(
            XNNFOLD,
            lambda: prepare_for_xnnpack(_seeded(lambda: Encoder(encoder_layers))),
            folding,
            x,
        ),
    ]
    measure(enc, repeats, say)
    ratio_cpu, ratio_wall = enc[1].cpu_s / enc[0].cpu_s, enc[1].wall_s / enc[0].wall_s
    identical = enc[0].pte == enc[1].pte
    lines += [
        f"## (a) {encoder_layers}-layer transformer encoder, no computed weights",
        "",
        "Hand-written attention (3-D bmm for scores, 4-D matmul for values, on activations), "
        "linears, LayerNorm, GELU.",
        "",
        "| variant | CPU s | wall s | export s | repeats | .pte bytes | max abs diff vs eager |",
        "|---|---|---|---|---|---|---|",
        *(row(v) for v in enc),
        "",
        f"xnnfold / stock: **{ratio_cpu:.3f}** CPU, {ratio_wall:.3f} wall "
        f"(target <= {MAX_ENCODER_RATIO}). Programs byte-identical: {'yes' if identical else 'NO'}.",
        "",
    ]
    if ratio_cpu > MAX_ENCODER_RATIO:
        failures.append(f"(a) encoder xnnfold/stock {ratio_cpu:.3f} > {MAX_ENCODER_RATIO}")
    if not identical:
        failures.append("(a) encoder: xnnfold's program differs from stock's")


def chain_case(
    chain_sizes: tuple[int, ...],
    repeats: int,
    lines: list[str],
    failures: list[str],
    say: Callable[[str], None],
) -> None:
    """(b) weight_norm chains."""
    lines += [
        "## (b) chain of weight_norm Conv1d",
        "",
        "| layers | variant | CPU s | wall s | CPU ms / layer | export s | repeats | .pte bytes | max abs diff vs eager |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    per_layer: dict[int, tuple[float, float]] = {}
    for layers in chain_sizes:
        say(f"(b) {layers}-layer weight_norm chain")
        x = (torch.randn(1, 16, 64),)
        chain = [
            Variant(
                XNNFOLD,
                lambda n=layers: prepare_for_xnnpack(_seeded(lambda: WeightNormChain(n))),
                folding,
                x,
            ),
            Variant(
                HAND_FOLDED,
                lambda n=layers: strip_parametrizations(_seeded(lambda: WeightNormChain(n))),
                stock,
                x,
            ),
        ]
        measure(chain, repeats, say)
        lines += [f"| {layers} {row(v, layers)}" for v in chain]
        per_layer[layers] = (chain[0].cpu_s, chain[1].cpu_s)
    summary = []
    previous: Optional[tuple[int, float, float]] = None
    for n, (f, h) in per_layer.items():
        if previous is None:
            marginal = "- | -"
        else:
            m, pf, ph = previous
            marginal = f"{(f - pf) / (n - m) * 1e3:.1f} | {(h - ph) / (n - m) * 1e3:.1f}"
        summary.append(
            f"| {n} | {f / n * 1e3:.1f} | {h / n * 1e3:.1f} | {marginal} | {f / h:.3f} |"
        )
        previous = (n, f, h)
    first, last = chain_sizes[0], chain_sizes[-1]
    growth = (per_layer[last][0] / last) / (per_layer[first][0] / first)
    hand_growth = (per_layer[last][1] / last) / (per_layer[first][1] / first)
    lines += [
        "",
        "Per layer: total CPU time / layers (includes the fixed cost of any lowering); marginal: "
        "CPU time added per layer since the previous size (constant when lowering is linear).",
        "",
        "| layers | xnnfold ms / layer | hand-folded ms / layer | xnnfold marginal ms / layer "
        "| hand-folded marginal ms / layer | xnnfold / hand-folded |",
        "|---|---|---|---|---|---|",
        *summary,
        "",
        f"xnnfold per-layer time at {last} layers / at {first}: **{growth:.3f}** "
        f"(target <= {MAX_CHAIN_PER_LAYER_GROWTH}); the stock lowering of the hand-folded "
        f"chain: {hand_growth:.3f}.",
        "",
    ]
    if growth > MAX_CHAIN_PER_LAYER_GROWTH:
        failures.append(f"(b) chain per-layer growth {growth:.3f} > {MAX_CHAIN_PER_LAYER_GROWTH}")


def hifigan_case(
    repeats: int, lines: list[str], failures: list[str], say: Callable[[str], None]
) -> None:
    """(c) HiFi-GAN-style generator."""
    source, build, build_hand, x = hifigan_source()
    say(f"(c) HiFi-GAN ({source})")
    hifi = [
        Variant(XNNFOLD, lambda: prepare_for_xnnpack(build()), folding, x),
        Variant(HAND_FOLDED, build_hand, stock, x),
        Variant(XNNFOLD_FILTER, lambda: prepare_for_xnnpack(build()), folding_with_filter, x),
    ]
    measure(hifi, repeats, say)
    convs = sum(isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)) for m in build().modules())
    ratio_cpu, ratio_wall = hifi[0].cpu_s / hifi[1].cpu_s, hifi[0].wall_s / hifi[1].wall_s
    filter_ratio = hifi[2].cpu_s / hifi[1].cpu_s
    identical = hifi[0].pte == hifi[2].pte
    lines += [
        f"## (c) HiFi-GAN-style generator: {source}, {convs} weight_norm convs",
        "",
        "| variant | CPU s | wall s | export s | repeats | .pte bytes | max abs diff vs eager |",
        "|---|---|---|---|---|---|---|",
        *(row(v) for v in hifi),
        "",
        f"xnnfold (parametrized) / stock (hand-folded): **{ratio_cpu:.3f}** CPU, "
        f"{ratio_wall:.3f} wall (target <= {MAX_HIFIGAN_RATIO}).",
        "",
        f"With `keep_decomposition_filter=True` (executorch's two extra decomposition passes, "
        f"as with the stock partitioner): **{filter_ratio:.3f}** CPU. Programs with and "
        f"without the filter byte-identical: {'yes' if identical else 'NO'}.",
        "",
    ]
    if ratio_cpu > MAX_HIFIGAN_RATIO:
        failures.append(f"(c) HiFi-GAN xnnfold/hand-folded {ratio_cpu:.3f} > {MAX_HIFIGAN_RATIO}")
    if not identical:
        failures.append("(c) HiFi-GAN: the program depends on keep_decomposition_filter")


if __name__ == "__main__":
    sys.exit(main())
