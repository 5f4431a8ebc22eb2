"""Stock vs xnnfold vs hand-folded over every fixture in xnnfold.fixtures.

Each fixture is lowered three ways and run through executorch.runtime; timed calls are
interleaved across the three programs (one call of each per round) so that machine noise
hits all of them alike. Writes a markdown table with medians and ratios.

    python benchmarks/timing/bench_fold.py --runs 30 --out benchmarks/timing/results.md
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path

import torch

from xnnfold.fixtures import compare_fixture, comparison_table, FIXTURES

# Left out of the default run: lowering it three ways takes minutes (tests/end_to_end/test_patterns.py
# covers it); pass --fixtures hundred_weight_norm to include it.
SLOW_TO_LOWER = frozenset({"hundred_weight_norm"})
DEFAULT_FIXTURES = sorted(set(FIXTURES) - SLOW_TO_LOWER)

# Targets from the project's issue: on this 2-core machine.
MAX_FOLDED_OVER_HAND = 1.05
MIN_STOCK_OVER_FOLDED_POS_CONV = 50.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="interleaved rounds per fixture")
    parser.add_argument(
        "--slow-budget", type=float, default=40.0, help="seconds of timing for a slow variant"
    )
    parser.add_argument("--fixtures", nargs="*", default=DEFAULT_FIXTURES, choices=sorted(FIXTURES))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    start = time.perf_counter()
    rows, ratios = [], []
    not_lowered: list[str] = []
    for name in args.fixtures:
        try:
            results = compare_fixture(
                FIXTURES[name],
                runs=args.runs,
                slow_budget_s=args.slow_budget,
                progress=lambda m: print(
                    f"{time.perf_counter() - start:7.1f}s {m}", file=sys.stderr, flush=True
                ),
            )
        except Exception as error:  # a variant executorch cannot lower: say so, go on
            reason = (
                str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            )
            print(f"[{name}] not compared: {reason}", file=sys.stderr, flush=True)
            not_lowered.append(f"{name}: {reason}")
            continue
        stock, folded, hand = results
        rows += [(name, r) for r in results]
        ratios.append(
            (
                name,
                stock.median_ms / folded.median_ms,
                folded.median_ms / hand.median_ms,
                folded.pte_bytes - hand.pte_bytes,
                folded.lower_seconds / hand.lower_seconds,
            )
        )

    lines = [
        "# xnnfold benchmark",
        "",
        f"`python benchmarks/timing/bench_fold.py --runs {args.runs}` on {platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}; "
        "medians over interleaved rounds.",
        "",
        comparison_table(rows),
        "",
        "| model | stock / xnnfold latency | xnnfold / hand-folded latency | .pte bytes xnnfold - hand-folded | lowering time xnnfold / hand-folded |",
        "|---|---|---|---|---|",
    ]
    failures = []
    for name, speedup, parity, size, lowering in ratios:
        lines.append(f"| {name} | {speedup:,.1f}x | {parity:.3f} | {size:+,} | {lowering:.2f} |")
        if parity > MAX_FOLDED_OVER_HAND:
            failures.append(f"{name}: xnnfold/hand-folded {parity:.3f} > {MAX_FOLDED_OVER_HAND}")
        if name == "pos_conv" and speedup < MIN_STOCK_OVER_FOLDED_POS_CONV:
            failures.append(
                f"{name}: stock/xnnfold {speedup:.1f}x < {MIN_STOCK_OVER_FOLDED_POS_CONV}x"
            )
    lines += ["", "Targets missed: " + ("; ".join(failures) if failures else "none"), ""]
    if not_lowered:
        lines += ["Not compared (a variant failed to lower or run):", ""]
        lines += [f"- {entry}" for entry in not_lowered] + [""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
