"""A long differential campaign: thousands of generated programs through the four oracles.

The problem: the pytest tier (``tests/end_to_end/test_differential.py``) can afford ~45 programs;
rare combinations (a bias of shape ``(M, 1)`` on an ``addmm`` with ``beta = 0`` in a
dynamic method) need thousands. This CLI runs the same generator
(`tests.support.grammar`) and the same oracles (`tests.support.differential.check_program`)
over ``--models`` seeds, shrinks each failure greedily
(`tests.support.shrinking.shrink`), and writes a Markdown summary:
programs run, failures per oracle (those where the stock program is as wrong as
xnnfold's marked "upstream"), per-kind counts, wall time, and every failure's
reproducer.

    python benchmarks/correctness/differential_campaign.py --models 2000 --seed 1 \\
        --out benchmarks/correctness/differential_results.md

Deterministic for a given ``--seed``/``--models``/``--shrink-attempts``; ``--max-chain-steps``
bounds the long-chain scenario (its stock lowering costs ~40 ms a node here).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Final, Optional

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `tests` is a package of the repository, not installed

import logging  # noqa: E402
import warnings  # noqa: E402

from tests.support.differential import (  # noqa: E402
    check_program,
    ORACLE_NAMES,
    ORACLES,
    Outcome,
)
from tests.support.grammar import generate_program, GenOptions, program_kinds  # noqa: E402
from tests.support.shrinking import reproducer, shrink  # noqa: E402

# Generated programs decline GEMMs on purpose: their WARNINGs are not findings.
logging.getLogger("xnnfold").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

DEFAULT_OUT: Final = Path(__file__).with_name("differential_results.md")
DEFAULT_SHRINK_ATTEMPTS: Final = 20
# Distinct failures are keyed by oracle and the message up to its first digit: the same
# bug on another program differs in numbers, not in words.
SIGNATURE_CHARS: Final = 60


def _signature(oracle: str, message: str) -> str:
    words = "".join(c if not c.isdigit() else "#" for c in message)
    return f"{oracle}: {words[:SIGNATURE_CHARS]}"


def _upstream(message: str) -> bool:
    return "(upstream: stock as wrong)" in message


def run(
    models: int,
    seed: int,
    out: Path,
    shrink_attempts: int,
    max_chain_steps: int,
    progress: bool,
    time_budget: Optional[float] = None,
    long_chain_weight: Optional[float] = None,
    only: Optional[list[int]] = None,
) -> int:
    options = GenOptions(max_chain_steps=max_chain_steps)
    if long_chain_weight is not None:
        # The stock lowering of a chain of thousands of nodes takes minutes here: a
        # campaign with a time budget draws fewer of them.
        options = replace(
            options,
            scenarios=tuple(
                (name, long_chain_weight if name == "long_chain" else weight)
                for name, weight in options.scenarios
            ),
        )
    start = time.perf_counter()
    failed_by_oracle: collections.Counter[str] = collections.Counter()
    upstream_by_oracle: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    failing_kinds: collections.Counter[str] = collections.Counter()
    notes: collections.Counter[str] = collections.Counter()
    first_of: dict[str, tuple[Outcome, str]] = {}
    also: collections.Counter[str] = collections.Counter()
    seconds: list[float] = []
    ran = failing_programs = 0
    for i in range(models) if only is None else [k - 1 for k in only]:
        if time_budget is not None and time.perf_counter() - start > time_budget:
            break  # the report says how many ran
        try:
            program = generate_program(seed * 1_000_003 + i, options)
        except Exception as exc:
            notes[f"generator error: {type(exc).__name__}: {str(exc)[:80]}"] += 1
            continue
        outcome = check_program(program)
        ran += 1
        seconds.append(outcome.seconds)
        labels = program_kinds(program)
        kinds.update(labels)
        failing_programs += bool(outcome.failures)
        for note in outcome.notes:
            notes[note.split(":")[0] + ": " + note.split(": ", 2)[-1][:80]] += 1
        for oracle in sorted(outcome.failed):
            messages = [f.message for f in outcome.failures if f.oracle == oracle]
            if all(_upstream(m) for m in messages):
                upstream_by_oracle[oracle] += 1
            else:
                failed_by_oracle[oracle] += 1
            failing_kinds.update(f"{oracle} {label}" for label in labels)
        for failure in outcome.failures:
            key = _signature(failure.oracle, failure.message)
            if key in first_of:
                also[key] += 1
            else:
                first_of[key] = (outcome, failure.oracle)
        if progress:
            print(
                f"[{i + 1}/{models}] {program.scenario:10s} {outcome.seconds:6.1f}s "
                f"{''.join(sorted(outcome.failed)) or 'ok'}",
                file=sys.stderr,
                flush=True,
            )
    run_seconds = time.perf_counter() - start

    sections = []
    for key, (outcome, oracle) in first_of.items():
        small, small_outcome = shrink(outcome.program, oracle, attempts=shrink_attempts)
        shown = next(
            (f for f in small_outcome.failures if f.oracle == oracle),
            next(f for f in outcome.failures if f.oracle == oracle),
        )
        sections.append(
            f"### {key}\n\nseen on {also[key] + 1} program(s); first: seed "
            f"{outcome.program.seed}\n\n```python\n{reproducer(small, shown)}\n```\n"
        )
    wall = time.perf_counter() - start

    lines = [
        "# Differential campaign",
        "",
        f"`python benchmarks/correctness/differential_campaign.py --models {models} --seed {seed} "
        f"--shrink-attempts {shrink_attempts} --max-chain-steps {max_chain_steps}"
        + (f" --time-budget {time_budget:g}" if time_budget is not None else "")
        + (f" --long-chain-weight {long_chain_weight:g}" if long_chain_weight is not None else "")
        + (f" --only {' '.join(map(str, only))}" if only is not None else "")
        + "`",
        "",
        (
            f"- programs run: {ran} of {models}"
            + (" (stopped by the time budget)" if ran < models else "")
        )
        if only is None
        else f"- programs re-checked: {ran} ({' '.join(map(str, only))})",
        f"- wall time: {wall:.0f} s ({run_seconds:.0f} s checking, {wall - run_seconds:.0f} s "
        f"shrinking); per program: median {sorted(seconds)[len(seconds) // 2]:.1f} s, "
        f"max {max(seconds):.1f} s"
        if seconds
        else "- wall time: 0 s",
        f"- programs failing at least one oracle: {failing_programs}; distinct failures: "
        f"{len(first_of)}",
        "",
        "| oracle | what | programs failing (xnnfold) | programs failing (upstream: stock as wrong) |",
        "|---|---|---|---|",
    ]
    for oracle in ORACLES:
        lines.append(
            f"| {oracle} | {ORACLE_NAMES[oracle]} | {failed_by_oracle[oracle]} | "
            f"{upstream_by_oracle[oracle]} |"
        )
    lines += [
        "",
        "## Per kind",
        "",
        "| label | programs | failing (a) | (b) | (c) | (d) |",
        "|---|---|---|---|---|---|",
    ]
    for label, count in sorted(kinds.items()):
        cells = " | ".join(str(failing_kinds[f"{o} {label}"]) for o in ORACLES)
        lines.append(f"| {label} | {count} | {cells} |")
    if notes:
        lines += ["", "## Notes (not oracle failures)", ""]
        lines += [f"- {count} x {note}" for note, count in notes.most_common(20)]
    lines += ["", f"## Distinct failures ({len(first_of)})", ""] + sections
    out.write_text("\n".join(lines) + "\n")
    return 1 if first_of else 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--shrink-attempts", type=int, default=DEFAULT_SHRINK_ATTEMPTS)
    parser.add_argument("--max-chain-steps", type=int, default=GenOptions().max_chain_steps)
    parser.add_argument("--quiet", action="store_true", help="no per-program progress on stderr")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="stop drawing programs after this many seconds (the report says how many ran)",
    )
    parser.add_argument(
        "--long-chain-weight",
        type=float,
        default=None,
        help="weight of the long-chain scenario (default: the generator's)",
    )
    parser.add_argument(
        "--only",
        type=int,
        nargs="+",
        default=None,
        help="re-check only these program numbers (1-based, as printed)",
    )
    args = parser.parse_args(argv)
    return run(
        args.models,
        args.seed,
        args.out,
        args.shrink_attempts,
        args.max_chain_steps,
        not args.quiet,
        args.time_budget,
        args.long_chain_weight,
        args.only,
    )


if __name__ == "__main__":
    raise SystemExit(main())
