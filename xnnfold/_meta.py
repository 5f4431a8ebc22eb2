"""The node-metadata keys through which xnnfold's stages talk, with no dependency at all.

`prepare_for_xnnpack` marks the nodes that compute a parametrized tensor (`SITE_META_KEY`
inside ``node.meta["custom"]``, which `torch.export` and the `to_edge` decompositions carry
over); the folding partitioner marks each GEMM it accepted with a computed weight or bias
(`FOLD_META_KEY`, with the options it decided with), and the fold pass reads those marks
inside XNNPACK preprocess. Every stage imports its keys from here, so a rename cannot
leave one behind, and marking (torch only) and the codemod (neither torch nor executorch)
can import them without executorch.
"""

from __future__ import annotations

from typing import Final, Optional

__all__ = [
    "CUSTOM_META_KEY",
    "DELEGATION_TAG_META_KEY",
    "EXTERNAL_CONSTANT_TAG",
    "EXTERNAL_TAG_KEYS",
    "FOLD_MARK_KEYS",
    "FOLD_META_KEY",
    "FOLD_OPTIONS_META_KEY",
    "FOLD_SCALES_META_KEY",
    "GROWTH_META_KEY",
    "NN_MODULE_STACK_META_KEY",
    "PARTITION_MARK_KEYS",
    "PRESERVED_META_KEY",
    "PROVENANCE_META_KEYS",
    "REASON_CODE_META_KEY",
    "REASON_META_KEY",
    "SITE_META_KEY",
    "STACK_TRACE_META_KEY",
    "VAL_META_KEY",
]

# torch.fx.traceback.annotate writes into node.meta["custom"]; export and the edge
# decompositions copy that dict onto every node they derive from a marked one.
CUSTOM_META_KEY: Final = "custom"
# Inside node.meta["custom"]: "<module path>.<tensor name>" of the parametrized tensor.
SITE_META_KEY: Final = "xnnfold_site"
# On a GEMM node the folding partitioner accepted: {arg index: site or None} to fold.
FOLD_META_KEY: Final = "xnnfold_fold"
# Beside it: the `FoldOptions` the partitioner decided with, so the fold pass that the
# preprocess hook builds re-checks with exactly those options.
FOLD_OPTIONS_META_KEY: Final = "xnnfold_fold_options"
# On an addmm the folding partitioner accepted with beta != 1 or alpha != 1: {arg index:
# factor}. XNNPACK's fully-connected op has no such scales, so the fold pass multiplies
# them into the weight and bias constants and resets the addmm's to 1.
FOLD_SCALES_META_KEY: Final = "xnnfold_fold_scales"
# On a GEMM whose fold grows the program, folded or left outside by the growth budget:
# (bytes added, the name of the group of folds that share its sources), for `explain`.
GROWTH_META_KEY: Final = "xnnfold_growth"
# The marks that ask the fold pass to rewrite a GEMM (`has_fold_marks`).
FOLD_MARK_KEYS: Final = (FOLD_META_KEY, FOLD_SCALES_META_KEY)
# Everything the partitioner writes onto a GEMM after its final matching round
# (`passes/partition/_outcome.py`), and clears first.
PARTITION_MARK_KEYS: Final = (
    FOLD_META_KEY,
    FOLD_SCALES_META_KEY,
    FOLD_OPTIONS_META_KEY,
    GROWTH_META_KEY,
)
# Inside node.meta["custom"] of an ATen node the partitioner asked executorch not to
# decompose for a fold. The decompositions rename the nodes they keep and carry only
# "custom" over, so this is how partitioning finds them in the edge program; the
# partitioner reads it once per call (`kept_for_folds`) and hands the names on as data.
PRESERVED_META_KEY: Final = "xnnfold_preserved"
# On a GEMM node the folding partitioner left outside its delegates: why, for `explain`.
REASON_META_KEY: Final = "xnnfold_reason"
# Beside it: the stable code of the rule that decided (XNF5xx, docs/reasons.md).
REASON_CODE_META_KEY: Final = "xnnfold_reason_code"

# torch.fx and executorch's own keys.
VAL_META_KEY: Final = "val"
NN_MODULE_STACK_META_KEY: Final = "nn_module_stack"
STACK_TRACE_META_KEY: Final = "stack_trace"
DELEGATION_TAG_META_KEY: Final = "delegation_tag"
# What a folded constant inherits from the root of its computation, so that `explain`,
# error messages and debug tools still name the module the weight came from.
PROVENANCE_META_KEYS: Final = (
    CUSTOM_META_KEY,
    NN_MODULE_STACK_META_KEY,
    STACK_TRACE_META_KEY,
)

# Where executorch 1.5.1 records that a constant belongs in an external `.ptd` file:
# (meta dict, key). `delegate_external_constants_pass_unlifted` writes
# meta["custom"]["delegate_constant_tag"] (XNNPACK's node visitor reads it for delegate
# constants); `to_executorch(ExecutorchBackendConfig(external_constants=...))` writes
# meta["constant_tag"] on top-level placeholders. None as the dict means node.meta itself.
EXTERNAL_TAG_KEYS: Final[tuple[tuple[Optional[str], str], ...]] = (
    ("custom", "delegate_constant_tag"),
    (None, "constant_tag"),
)
# The tag `ExecutorchBackendConfig(external_constants=True)` gives every program constant
# (executorch.exir.passes.external_constants_pass): its file is "<tag>.ptd". Tied tables
# are tagged with it too, so both configurations keep them in one file.
EXTERNAL_CONSTANT_TAG: Final = "_default_external_constant"
