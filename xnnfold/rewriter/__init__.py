"""Before export: find and mark the tensors a model computes from its parameters.

Also the codemod's per-file rules (`transform_source`), which find such tensors in source
code and migrate legacy weight_norm to parametrizations.
"""

from typing import TYPE_CHECKING

from xnnfold._lazy import lazy_exports

# Each public name, from the module that defines it, imported on first access (PEP 562;
# `lazy_exports` reads this block): _marking imports torch, which the codemod (libcst
# only) never needs.
if TYPE_CHECKING:
    from xnnfold.rewriter._marking import (
        find_sites,
        FoldSite,
        is_prepared,
        prepare_for_xnnpack,
        unprepare_for_xnnpack,
    )
    from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding
    from xnnfold.rewriter.codemod._rules import transform_source


__getattr__, __dir__ = lazy_exports(__name__, __file__, globals())


__all__ = [
    "CodemodOptions",
    "FileOutcome",
    "Finding",
    "FoldSite",
    "find_sites",
    "is_prepared",
    "prepare_for_xnnpack",
    "transform_source",
    "unprepare_for_xnnpack",
]
