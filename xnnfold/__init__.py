"""xnnfold: computed GEMM weights (weight_norm, spectral_norm, ...) on ExecuTorch's XNNPACK.

ExecuTorch's XNNPACK partitioner only delegates a convolution, linear, addmm or mm whose
weight is a static parameter, so a GEMM whose weight is computed from parameters falls to
the portable kernels together with its weight computation. xnnfold partitions the weight
computation with the GEMM and folds it into a constant inside the delegate at preprocess.

    model = prepare_for_xnnpack(model.eval())
    ep = torch.export.export(model, example_inputs)
    et = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
"""

from typing import TYPE_CHECKING

from xnnfold._lazy import lazy_exports
from xnnfold._version import __version__ as __version__

# Each public name, from the module that defines it, imported on first access (PEP 562;
# `lazy_exports` reads this block): these modules import torch and executorch (seconds),
# which `xnnfold --help` and `xnnfold codemod` never need.
if TYPE_CHECKING:
    from xnnfold.lowering._lower import lower, to_executorch
    from xnnfold.lowering._runtime import LoadedProgram, run_pte
    from xnnfold.lowering._save import data_files, data_paths, save
    from xnnfold.passes import (
        CrossMethodFacts,
        FoldComputedWeightsPass,
        install_preprocess_hook,
        is_preprocess_hook_installed,
        uninstall_preprocess_hook,
        XnnpackFoldingPartitioner,
    )
    from xnnfold.passes._options import DEFAULT_GROWTH_BUDGET, GrowthBudget, NO_GROWTH
    from xnnfold.passes.fold._unused import remove_unused_constants
    from xnnfold.passes.report._explain import (
        ExactGeluRow,
        explain,
        ExplainReport,
        GemmRow,
        OpRow,
        SharedTable,
        TableStoredTwice,
    )
    from xnnfold.passes.report._summary import ProgramSummary, summarize
    from xnnfold.rewriter import (
        find_sites,
        FoldSite,
        is_prepared,
        prepare_for_xnnpack,
        unprepare_for_xnnpack,
    )


__getattr__, __dir__ = lazy_exports(__name__, __file__, globals())


__all__ = [
    "CrossMethodFacts",
    "DEFAULT_GROWTH_BUDGET",
    "ExactGeluRow",
    "ExplainReport",
    "GemmRow",
    "GrowthBudget",
    "NO_GROWTH",
    "OpRow",
    "explain",
    "FoldComputedWeightsPass",
    "FoldSite",
    "LoadedProgram",
    "ProgramSummary",
    "XnnpackFoldingPartitioner",
    "find_sites",
    "install_preprocess_hook",
    "is_prepared",
    "is_preprocess_hook_installed",
    "lower",
    "prepare_for_xnnpack",
    "remove_unused_constants",
    "run_pte",
    "SharedTable",
    "TableStoredTwice",
    "data_files",
    "data_paths",
    "save",
    "summarize",
    "to_executorch",
    "uninstall_preprocess_hook",
    "unprepare_for_xnnpack",
]
