"""xnnfold: computed GEMM weights (weight_norm, spectral_norm, ...) on ExecuTorch's XNNPACK.

ExecuTorch's XNNPACK partitioner only delegates a convolution, linear, addmm or mm whose
weight is a static parameter, so a GEMM whose weight is computed from parameters falls to
the portable kernels together with its weight computation. xnnfold partitions the weight
computation with the GEMM and folds it into a constant inside the delegate at preprocess.

    model = prepare_for_xnnpack(model.eval())
    ep = torch.export.export(model, example_inputs)
    et = to_edge_transform_and_lower(ep, partitioner=[XnnpackFoldingPartitioner()])
"""

from xnnfold._inspect import ProgramSummary, summarize
from xnnfold._lower import lower, to_executorch
from xnnfold._runtime import LoadedProgram, run_pte
from xnnfold.passes import (
    FoldComputedWeightsPass,
    install_preprocess_hook,
    is_preprocess_hook_installed,
    uninstall_preprocess_hook,
    XnnpackFoldingPartitioner,
)
from xnnfold.rewriter import (
    find_sites,
    FoldSite,
    prepare_for_xnnpack,
    unprepare_for_xnnpack,
)

__version__ = "0.1.0"

__all__ = [
    "FoldComputedWeightsPass",
    "FoldSite",
    "LoadedProgram",
    "ProgramSummary",
    "XnnpackFoldingPartitioner",
    "find_sites",
    "install_preprocess_hook",
    "is_preprocess_hook_installed",
    "lower",
    "prepare_for_xnnpack",
    "run_pte",
    "summarize",
    "to_executorch",
    "uninstall_preprocess_hook",
    "unprepare_for_xnnpack",
]
