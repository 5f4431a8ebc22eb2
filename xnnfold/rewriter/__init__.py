"""Before export: find and mark the tensors a model computes from its parameters."""

from xnnfold.rewriter._prepare import (
    FoldSite,
    find_sites,
    prepare_for_xnnpack,
    unprepare_for_xnnpack,
)

__all__ = ["FoldSite", "find_sites", "prepare_for_xnnpack", "unprepare_for_xnnpack"]
