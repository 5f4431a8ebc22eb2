"""The command line every sweep script shares (``python -m benchmarks.sweeps.<library>
--help``): a sweep (`driver.run`), ``--report``, ``--compact``, ``--retime`` and
``--relower`` (`remeasure`), and ``--worker``, which the driver's workers run."""

from __future__ import annotations

import argparse
from typing import Optional

from benchmarks.sweeps.engine.driver import DEFAULT_LOWERING_TIMEOUT, DEFAULT_TIMEOUT, run
from benchmarks.sweeps.engine.library import Library
from benchmarks.sweeps.engine.relower import to_relower
from benchmarks.sweeps.engine.remeasure import relower, retime
from benchmarks.sweeps.engine.report import report
from benchmarks.sweeps.engine.results import compact, read_results
from benchmarks.sweeps.engine.retime import to_retime
from benchmarks.sweeps.engine.worker import serve, WORKER_MEMORY


def parser(description: str) -> argparse.ArgumentParser:
    """The command line's options, ``description`` its help text."""
    parser = argparse.ArgumentParser(description=description.strip())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--only", nargs="*", help="names to sweep (retime, relower)")
    parser.add_argument("--limit", type=int, help="at most this many")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="CPU seconds to build and export"
    )
    parser.add_argument(
        "--lowering-timeout",
        type=float,
        default=DEFAULT_LOWERING_TIMEOUT,
        help="CPU seconds for each later phase: each partitioner's lowering, the timing, ...",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--compare-all",
        action="store_true",
        help="stock's partitioner (and the library's exporter) for every candidate, even "
        "one whose lowering has no computed-weight GEMM (lowering times side by side)",
    )
    parser.add_argument(
        "--no-extra",
        action="store_true",
        help="leave out the library's second lowering path (transformers' exporter)",
    )
    parser.add_argument(
        "--screen-only",
        action="store_true",
        help="build, export and screen; leave the lowerings to a later run",
    )
    parser.add_argument(
        "--redo", nargs="*", default=[], help="redo the results at these stages or statuses"
    )
    parser.add_argument("--fresh", action="store_true", help="redo the names given")
    parser.add_argument("--report", action="store_true", help="write the markdown only")
    parser.add_argument(
        "--compact",
        action="store_true",
        help="rewrite the results file keeping only the latest line of each class (what "
        "the report and a rerun read); not while a sweep of this library runs: what it "
        "appends meanwhile would be lost. Git keeps the lines dropped",
    )
    parser.add_argument(
        "--retime",
        action="store_true",
        help="retime the rows where xnnfold ran over 1.03x stock, each in fresh processes "
        "(with --fresh, those retimed already too; with --only, those named)",
    )
    parser.add_argument(
        "--relower",
        action="store_true",
        help="lower the rows lowered both ways again, each lowering alone in a fresh "
        "worker, stock's and xnnfold's interleaved, and record each one's CPU seconds and "
        "peak RSS; the report takes their medians (with --fresh, the rows relowered "
        "already too; with --only, those named)",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="--relower's lowerings with each partitioner"
    )
    parser.add_argument(
        "--worker-memory",
        type=float,
        default=WORKER_MEMORY / 2**30,
        help="GiB of address space per worker (recorded on each line where not the default)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def _chosen(names: list[str], args: argparse.Namespace) -> list[str]:
    """``names`` (rows to measure again) narrowed to those ``--only`` names, at most
    ``--limit`` of them."""
    if args.only:
        names = [name for name in names if name in set(args.only)]
    return names[: args.limit] if args.limit else names


def main(library: Library, *, description: str = "", argv: Optional[list[str]] = None) -> int:
    """The command line of a sweep over ``library`` (``argv``, else the process's),
    ``description`` its help text."""
    args = parser(description).parse_args(argv)
    memory = int(args.worker_memory * 2**30)
    if args.worker:
        return serve(library, memory=memory)
    if args.compact:
        size = library.results.stat().st_size if library.results.exists() else 0
        before, after = compact(library.results)
        now = library.results.stat().st_size if library.results.exists() else 0
        print(f"{library.results}: {before} lines, {size:,} B -> {after} lines, {now:,} B")
        return 0
    classes = library.discover()
    if args.report:
        library.table.write_text(report(library, read_results(library.results), classes))
        return 0
    if args.retime:
        retime(
            library,
            _chosen(to_retime(read_results(library.results), again=args.fresh), args),
            timeout=args.timeout,
            lowering_timeout=args.lowering_timeout,
            memory=memory,
        )
        return 0
    if args.relower:
        relower(
            library,
            _chosen(to_relower(read_results(library.results), again=args.fresh), args),
            runs=args.runs,
            timeout=args.timeout,
            lowering_timeout=args.lowering_timeout,
            memory=memory,
        )
        return 0
    classes = library.order(classes)
    if args.only:
        wanted = set(args.only)
        classes = [c for c in classes if c[1] in wanted]
    if args.limit:
        classes = classes[: args.limit]
    # Classes to sweep again: their new line supersedes the old (`read_results`), and a
    # sweep never rewrites the file, so a run beside another on the same file loses no
    # line (`--compact` does rewrite it, and runs alone).
    again: set[str] = set()
    if args.redo:
        stages = set(args.redo)
        results = read_results(library.results)
        again = {n for n, r in results.items() if {r.get("stage"), r["status"]} & stages}
    if args.fresh:
        again |= {n for _, n in classes}
    run(
        library,
        classes,
        again=again,
        timeout=args.timeout,
        lowering_timeout=args.lowering_timeout,
        jobs=args.jobs,
        compare_all=args.compare_all,
        screen_only=args.screen_only,
        extra=not args.no_extra,
        memory=memory,
    )
    return 0
