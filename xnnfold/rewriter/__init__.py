"""Before export: find and mark the tensors a model computes from its parameters.

Also the codemod's per-file rules (`transform_source`), which find such tensors in source
code and migrate legacy weight_norm to parametrizations.
"""

from typing import TYPE_CHECKING

from xnnfold._lazy import lazy_attributes

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

# Public name -> defining module, resolved on first access (PEP 562): _prepare imports
# torch, which the codemod (libcst only) never needs.
_LAZY: dict[str, str] = {
    "CodemodOptions": "xnnfold.rewriter.codemod._api",
    "FileOutcome": "xnnfold.rewriter.codemod._api",
    "Finding": "xnnfold.rewriter.codemod._api",
    "transform_source": "xnnfold.rewriter.codemod._rules",
    "FoldSite": "xnnfold.rewriter._marking",
    "find_sites": "xnnfold.rewriter._marking",
    "is_prepared": "xnnfold.rewriter._marking",
    "prepare_for_xnnpack": "xnnfold.rewriter._marking",
    "unprepare_for_xnnpack": "xnnfold.rewriter._marking",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


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
