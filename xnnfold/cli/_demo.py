"""Lower one fixture three ways (stock, xnnfold, hand-folded) and measure them side by side.

Shared by ``xnnfold demo`` and ``benchmarks/``: the same lowering, the same runtime, and
calls interleaved across variants so that machine noise hits all three alike.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

from xnnfold._upstream import tree_leaves
from xnnfold.fixtures import Fixture
from xnnfold.lowering._lower import lower
from xnnfold.lowering._runtime import LoadedProgram
from xnnfold.passes.report._summary import summarize

__all__ = ["VariantResult", "compare_fixture", "format_table", "VARIANTS"]

STOCK = "stock"
XNNFOLD = "xnnfold"
HAND_FOLDED = "hand-folded"
VARIANTS = (STOCK, XNNFOLD, HAND_FOLDED)


@dataclass
class VariantResult:
    """One lowering of one fixture, measured."""

    variant: str
    delegates: int
    outside_ops: str
    pte_bytes: int
    lower_seconds: float
    times: list[float]
    max_abs_diff: float

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3 if self.times else float("nan")


def _lower_variant(variant: str, fixture: Fixture) -> tuple[bytes, int, str, float]:
    inputs = fixture.inputs()
    start = time.perf_counter()
    if variant == XNNFOLD:
        edge = lower(fixture.model(), inputs)
    else:
        model = fixture.model() if variant == STOCK else fixture.hand_folded()
        ep = torch.export.export(model, inputs)
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    summary = summarize(edge)
    buffer = edge.to_executorch().buffer
    return buffer, summary.delegates, summary.outside_ops_text(), time.perf_counter() - start


def _max_abs_diff(outputs: list[Any], reference: Any) -> float:
    """Largest difference over every tensor output (models may return several)."""
    expected = [t for t in tree_leaves(reference) if isinstance(t, torch.Tensor)]
    got = [t for t in outputs if isinstance(t, torch.Tensor)]
    if len(got) != len(expected):
        raise RuntimeError(f"the program returned {len(got)} tensors, eager {len(expected)}")
    return max(
        (float((g.double() - e.double()).abs().max()) for g, e in zip(got, expected)),
        default=0.0,
    )


def compare_fixture(
    fixture: Fixture,
    *,
    runs: int,
    warmup: int = 1,
    slow_budget_s: float = 60.0,
    progress: Optional[Callable[[str], None]] = None,
) -> list[VariantResult]:
    """Lower ``fixture`` three ways, check each against eager and time them interleaved.

    A variant whose single call exceeds a tenth of ``slow_budget_s`` (stock on a large
    conv takes tens of seconds) stops being timed once its time spent reaches the budget;
    its median is then over the calls it got.
    """
    say = progress or (lambda _: None)
    inputs = fixture.inputs()
    with torch.no_grad():
        reference = fixture.model()(*inputs)

    results: dict[str, VariantResult] = {}
    programs: dict[str, LoadedProgram] = {}
    first_calls: dict[str, float] = {}
    for variant in VARIANTS:
        say(f"[{fixture.name}] lowering {variant} ...")
        buffer, delegates, outside, seconds = _lower_variant(variant, fixture)
        programs[variant] = LoadedProgram(buffer)
        say(f"[{fixture.name}] running {variant} once against eager ...")
        start = time.perf_counter()
        outputs = programs[variant](inputs)
        first_call = time.perf_counter() - start
        first_calls[variant] = first_call
        diff = _max_abs_diff(outputs, reference)
        results[variant] = VariantResult(
            variant, delegates, outside, len(buffer), seconds, [], diff
        )
        if first_call > slow_budget_s / 10:
            results[variant].times.append(first_call)

    for _ in range(warmup):
        for variant in VARIANTS:
            if not results[variant].times:
                programs[variant](inputs)
    # Tiny programs run in microseconds: time batches of calls long enough (~2 ms) for
    # the clock and the scheduler to fade into the median.
    fast = min(first_calls.values())
    batch = max(1, min(200, math.ceil(2e-3 / max(fast, 1e-6))))
    say(f"[{fixture.name}] timing {runs} interleaved rounds of {batch} call(s) ...")
    orders = list(itertools.permutations(VARIANTS))
    for round_ in range(runs):
        # Cycle through every order: a call right after a slow portable call finds
        # XNNPACK's worker threads asleep, which must not always tax the same variant.
        for variant in orders[round_ % len(orders)]:
            result = results[variant]
            if result.times and sum(result.times) >= slow_budget_s:
                continue
            n = 1 if first_calls[variant] > slow_budget_s / 10 else batch
            start = time.perf_counter()
            for _ in range(n):
                programs[variant](inputs)
            result.times.append((time.perf_counter() - start) / n)
    return [results[v] for v in VARIANTS]


def format_table(rows: list[tuple[str, VariantResult]]) -> str:
    """A markdown table of (fixture name, result) rows."""
    header = (
        "| model | variant | delegates | ops outside delegates | .pte bytes "
        "| median latency (ms) | samples | max abs diff vs eager |"
    )
    lines = [header, "|" + "---|" * 8]
    for name, r in rows:
        lines.append(
            f"| {name} | {r.variant} | {r.delegates} | {r.outside_ops} | {r.pte_bytes:,} "
            f"| {r.median_ms:,.2f} | {len(r.times)} | {r.max_abs_diff:.3g} |"
        )
    return "\n".join(lines)
