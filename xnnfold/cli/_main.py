"""The ``xnnfold`` command: ``xnnfold demo`` lowers the built-in default three ways."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Optional, Sequence

from xnnfold._exit_codes import EXIT_USAGE
from xnnfold._lazy import LOWERING_EXTRA_HINT, missing_lowering_package
from xnnfold.cli._noise import quiet_upstream_noise

__all__ = ["main"]

# The help of -v, accepted before or after the subcommand.
_VERBOSE_HELP = (
    "also show known-harmless upstream import warnings (torchao's CUDA-only "
    "extensions, torch deprecation notices)"
)


def _demo(args: argparse.Namespace) -> int:
    # Imported here so that `xnnfold --help` answers without loading torch.
    from xnnfold.fixtures import compare_fixture, comparison_table, DEFAULT_FIXTURE, FIXTURES

    name = DEFAULT_FIXTURE if args.fixture is None else args.fixture
    if name not in FIXTURES:
        # Checked here, not by argparse choices: listing them imports torch (seconds),
        # which `xnnfold --help` and `xnnfold codemod` must not pay.
        args.parser.error(
            f"argument --fixture: invalid choice: {name!r} "
            f"(choose from {', '.join(sorted(FIXTURES))})"
        )
    fixture = FIXTURES[name]
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"{time.perf_counter() - start:6.1f}s  {message}", file=sys.stderr, flush=True)

    progress(f"model: {fixture.description}; input {tuple(fixture.inputs()[0].shape)}")
    results = compare_fixture(
        fixture, runs=args.runs, slow_budget_s=args.slow_budget, progress=progress
    )
    print(comparison_table([(fixture.name, r) for r in results]))
    stock, folded, hand = results
    print(
        f"\nstock / xnnfold median latency: {stock.median_ms / folded.median_ms:,.1f}x; "
        f"xnnfold / hand-folded: {folded.median_ms / hand.median_ms:.3f}; "
        f".pte bytes xnnfold - hand-folded: {folded.pte_bytes - hand.pte_bytes:+,}"
    )
    progress("done")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="xnnfold",
        description="Fold computed GEMM weights (weight_norm, spectral_norm, ...) into "
        "ExecuTorch's XNNPACK delegate.",
    )
    # Accepted before or after the subcommand (`xnnfold -v demo`, `xnnfold demo -v`).
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help=_VERBOSE_HELP,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        parents=[verbose],
        help="lower the built-in default (wav2vec2's positional conv) stock, with xnnfold "
        "and hand-folded; run each through executorch.runtime; print one table",
    )
    demo.add_argument(
        "--fixture",
        default=None,
        metavar="NAME",
        help="a built-in fixture (default: the wav2vec2 positional conv, pos_conv; an "
        "unknown name lists them all)",
    )
    demo.set_defaults(parser=demo)
    demo.add_argument("--runs", type=int, default=5, help="timed calls per variant")
    demo.add_argument(
        "--slow-budget",
        type=float,
        default=30.0,
        help="seconds of timed calls after which a slow variant (stock) stops being timed",
    )
    demo.set_defaults(func=_demo)
    from xnnfold.cli._codemod import add_codemod_parser

    add_codemod_parser(sub, parents=[verbose])
    from xnnfold.cli._export import add_export_parser

    add_export_parser(sub, parents=[verbose])
    args = parser.parse_args(argv)
    if args.command == "demo" and args.runs < 1:
        parser.error("--runs must be at least 1")
    try:
        if args.verbose:
            return int(args.func(args))
        with warnings.catch_warnings(), quiet_upstream_noise():
            # Upstream deprecation notices (torch's pytree, executorch's exir) are for
            # their callers' developers, not for a user running a command.
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            return int(args.func(args))
    except ModuleNotFoundError as error:
        missing = missing_lowering_package(error)
        if missing is None:
            raise
        print(
            f"xnnfold {args.command}: needs {missing}, which is not installed (this is "
            f"the codemod-only install); {LOWERING_EXTRA_HINT}",
            file=sys.stderr,
        )
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
