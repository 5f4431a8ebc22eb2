"""After export: partition computed GEMM weights with their GEMM and fold them at preprocess."""

from xnnfold._releases import UnsupportedRelease
from xnnfold.passes._options import DEFAULT_GROWTH_BUDGET, FoldOptions, GrowthBudget, NO_GROWTH
from xnnfold.passes.analysis import (
    find_weight_computation,
    Rejection,
    WeightComputation,
)
from xnnfold.passes.fold._hook import (
    install_preprocess_hook,
    is_preprocess_hook_installed,
    uninstall_preprocess_hook,
)
from xnnfold.passes.fold._pass import FoldComputedWeightsPass
from xnnfold.passes.partition._configs import (
    folding_configs,
    FOLDING_GEMM_CONFIGS,
    FoldingAddmmConfig,
    FoldingConvolutionConfig,
    FoldingLinearConfig,
    FoldingMMConfig,
)
from xnnfold.passes.partition._facts import CrossMethodFacts
from xnnfold.passes.partition._partitioner import XnnpackFoldingPartitioner

__all__ = [
    "CrossMethodFacts",
    "DEFAULT_GROWTH_BUDGET",
    "FOLDING_GEMM_CONFIGS",
    "FoldComputedWeightsPass",
    "FoldOptions",
    "FoldingAddmmConfig",
    "FoldingConvolutionConfig",
    "FoldingLinearConfig",
    "FoldingMMConfig",
    "GrowthBudget",
    "NO_GROWTH",
    "Rejection",
    "UnsupportedRelease",
    "WeightComputation",
    "XnnpackFoldingPartitioner",
    "find_weight_computation",
    "folding_configs",
    "install_preprocess_hook",
    "is_preprocess_hook_installed",
    "uninstall_preprocess_hook",
]
