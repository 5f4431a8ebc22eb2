"""The codemod: find computed-weight sites in source, migrate legacy weight_norm, wire exports.

It runs on source text with libcst alone (no torch, no executorch), so a linter job or a
pre-commit hook can run it. `_rules` runs the per-file rules (one module per concern beside
it) and holds the code table (XNF1xx ...), `_driver` walks a tree of files and writes
atomically, `_command` is the same rules as a ``python -m libcst.tool codemod`` command.
"""

from typing import TYPE_CHECKING

from xnnfold._lazy import lazy_exports

# Each public name, from the module that defines it, imported on first access (PEP 562;
# `lazy_exports` reads this block): the driver lives in this package, and
# `xnnfold codemod --help` must not pay for libcst.
if TYPE_CHECKING:
    from xnnfold.rewriter.codemod._api import (
        CodemodOptions,
        FileOutcome,
        Finding,
        UnparseableSource,
    )
    from xnnfold.rewriter.codemod._command import XnnfoldCodemod
    from xnnfold.rewriter.codemod._driver import run_codemod
    from xnnfold.rewriter.codemod._report import CodemodSummary
    from xnnfold.rewriter.codemod._rules import transform_source


__getattr__, __dir__ = lazy_exports(__name__, __file__, globals())

__all__ = [
    "CodemodOptions",
    "CodemodSummary",
    "FileOutcome",
    "Finding",
    "UnparseableSource",
    "XnnfoldCodemod",
    "run_codemod",
    "transform_source",
]
