"""``xnnfold codemod``: the command line of the codemod driver (`run_codemod`).

Parses the options, runs the driver, prints findings, diffs or JSON on stdout and the
summary on stderr. Imports libcst only when a run starts, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Sequence
from typing import Final, Optional, TextIO

from xnnfold.rewriter.codemod._api import CodemodOptions
from xnnfold.rewriter.codemod._driver import (
    CodemodSummary,
    format_summary,
    FORMATS,
    PROGRESS_MIN_FILES,
    PRUNED_DIR_NAMES,
    run_codemod,
    Transform,
)

__all__ = ["add_codemod_parser", "main"]


def _emit(summary: CodemodSummary, *, fmt: str, stdout: TextIO, stderr: TextIO) -> None:
    if fmt == "json":
        json.dump(summary.to_json(), stdout, indent=2)
        stdout.write("\n")
    elif summary.mode == "diff":
        for report in summary.files:
            if report.diff:
                stdout.write(report.diff)
    else:
        written = summary.written
        for path, finding in summary.findings:
            stdout.write(finding.format(path, written=path in written) + "\n")
        if summary.mode in ("write", "check"):
            verb = "rewrote" if summary.mode == "write" else "would rewrite"
            for path in summary.changed:
                stderr.write(f"{verb} {path}\n")
    stdout.flush()
    stderr.write(format_summary(summary) + "\n")
    stderr.flush()


_DESCRIPTION: Final = (
    "Rewrite Python sources for xnnfold: migrate legacy torch.nn.utils.weight_norm to the\n"
    "parametrization, wrap models passed to torch.export.export in prepare_for_xnnpack and\n"
    "swap XnnpackPartitioner for XnnpackFoldingPartitioner; report the sites found."
)

_EPILOG: Final = f"""\
modes: rewrite in place (default); --diff prints a unified diff and writes nothing;
--check writes nothing and exits 1 if a rewrite is pending; --report prints findings
(path:line:col: CODE message) and writes nothing.

walking: a PATH file is processed whatever its suffix; a PATH directory is walked for *.py.
Inside a walk these are pruned: hidden files and directories (.git, .venv, .tox, ...),
{", ".join(sorted(PRUNED_DIR_NAMES))},
*.egg-info, and any directory holding a pyvenv.cfg (a virtualenv of any name).
.ipynb notebooks are skipped with a note. Symlinks inside a walk are never followed (no
file is edited twice, none outside the tree) and are listed as skipped; a PATH given
explicitly as a symlink is followed and its target rewritten, the link kept. A file
reached twice (links, overlapping PATHs) is processed once.

files that do not parse (syntax error, undecodable bytes) are reported and left
byte-identical. Files holding none of the names the rules look for are only compiled
(to catch syntax errors), not analysed. Rewrites are atomic (temp file + rename, file
mode kept); files without a rewrite are not touched (their mtime stays). The summary
goes to stderr.

exit status: 0 done (and, with --check, nothing pending); 1 some file could not be
processed, or --check found a pending rewrite; 2 usage error (bad option, missing PATH).
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--diff",
        dest="mode",
        action="store_const",
        const="diff",
        help="print a unified diff of the rewrites to stdout; write nothing",
    )
    modes.add_argument(
        "--check",
        dest="mode",
        action="store_const",
        const="check",
        help="write nothing; exit 1 if any file would be rewritten",
    )
    modes.add_argument(
        "--report",
        dest="mode",
        action="store_const",
        const="report",
        help="print the findings, one per line (path:line:col: CODE message); write nothing",
    )
    parser.set_defaults(mode="write")
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=FORMATS,
        default="text",
        help="stdout format: text (findings or diff) or json (findings, rewrites, skips, summary)",
    )
    parser.add_argument(
        "--no-migrate",
        action="store_true",
        help="do not migrate legacy torch.nn.utils.weight_norm / spectral_norm (still reported)",
    )
    parser.add_argument(
        "--migrate-spectral-norm",
        action="store_true",
        help="also migrate legacy spectral_norm (torch has no state_dict hook for its keys)",
    )
    parser.add_argument(
        "--no-export-wiring",
        action="store_true",
        help="do not wrap torch.export.export models in prepare_for_xnnpack nor swap "
        "XnnpackPartitioner for XnnpackFoldingPartitioner",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="migrate even files that use legacy state_dict keys or attributes "
        "(weight_g, weight_v, weight_orig, ...)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (0 = one per CPU; default 1); output does not depend on N",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"progress bar on stderr (default: on a TTY, for {PROGRESS_MIN_FILES}+ files)",
    )


def _run_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.no_migrate and args.migrate_spectral_norm:
        parser.error("--no-migrate and --migrate-spectral-norm contradict each other")
    if args.jobs < 0:
        parser.error("-j/--jobs must be 0 (one per CPU) or positive")
    for path in args.paths:
        if not os.path.exists(path):
            parser.error(f"{path}: no such file or directory")
    options = CodemodOptions(
        migrate_weight_norm=not args.no_migrate,
        migrate_spectral_norm=args.migrate_spectral_norm,
        wire_export=not args.no_export_wiring,
        force=args.force,
    )
    summary = run_codemod(
        args.paths,
        options=options,
        mode=args.mode,
        jobs=args.jobs,
        progress=args.progress,
        transform=getattr(args, "transform", None),
    )
    _emit(summary, fmt=args.fmt, stdout=sys.stdout, stderr=sys.stderr)
    return summary.exit_code


def add_codemod_parser(
    subparsers: argparse._SubParsersAction,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.ArgumentParser:
    """Add ``codemod`` to a subcommand set; the parser's ``func(args)`` runs it."""
    parser = subparsers.add_parser(
        "codemod",
        parents=list(parents),
        help="rewrite sources: migrate legacy weight_norm, wire export to xnnfold; or report",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(parser)
    parser.set_defaults(func=functools.partial(_run_args, parser=parser))
    return parser


def main(argv: Optional[Sequence[str]] = None, *, transform: Optional[Transform] = None) -> int:
    """``xnnfold codemod`` as a function: parse ``argv``, run, print, return the exit status.

    Usage errors exit through argparse with status 2.
    """
    parser = argparse.ArgumentParser(
        prog="xnnfold codemod",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(parser)
    args = parser.parse_args(argv)
    args.transform = transform
    return _run_args(args, parser)
