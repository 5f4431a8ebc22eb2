"""The node-metadata keys of xnnfold's stages, each with its one writer, and no imports at all.

Marking (torch only) and the codemod (neither torch nor executorch) import their keys from
here without executorch, and a rename cannot leave one behind. What a stage decided
reaches the next stage as a value (its findings, `decide`'s arguments); node.meta carries
only what someone else reads after the stage returned:

- what executorch reads:

  - ``delegation_tag`` (`DELEGATION_TAG_META_KEY`): the partition a node is delegated
    in; written by `tag_partitions` (``passes/partition/_grouping.py``), as executorch's
    `ConfigerationBasedPartitioner` tags, but named `XNNFOLD_TAG_PREFIX` and the
    partition's number (``xnnfold0``, not ``tag0``). The preprocess hook's copy reads the
    name to tell a delegate xnnfold partitioned from any other partitioner's
    (``passes/fold/_shared_copy.py``); executorch compares tags and names a
    temporary submodule after one, and no program's bytes hold it.
  - the external-data tags (`EXTERNAL_TAG_KEYS`) of a tied table's placeholder, under
    executorch's default tag (`EXTERNAL_CONSTANT_TAG`); written by `tag_external`
    (``passes/partition/_tied_tagging.py``), with ``tie_tables=True``.

- the one fold mark, the only carrier into XNNPACK preprocess (executorch hands it the
  delegate's program alone): ``xnnfold_fold`` (`FOLD_META_KEY`), a frozen `FoldMark`
  (``passes/_marks.py``: the arguments to fold with their sites, addmm's scales, the
  `FoldOptions`, the growth of each fold) on each delegated GEMM with something to fold,
  or a `TanhGeluMark` on each delegated tanh GELU the installed serializer would write as
  exact GELU; written by `write_fold_marks` (``passes/partition/_outcome.py``), read by
  the fold pass, the tanh GELU pass, their hook and `explain`. The fold pass drops a
  `FoldMark` from its private copy once it has folded; the GELU pass replaces the node.

- what `explain` reads from a lowered program: ``xnnfold_reason`` (`REASON_META_KEY`), a
  frozen `GemmReason` (the reason, its code and, for a GEMM the growth budget left
  outside, what its folds would have added) on each GEMM outside a delegate or taking
  its weight at run time; written by `record_reasons` (``passes/partition/_outcome.py``).

- inside ``node.meta["custom"]`` (`CUSTOM_META_KEY`), the one dict `torch.export` and
  executorch's decompositions carry onto the nodes they derive:

  - ``xnnfold_site`` (`SITE_META_KEY`): which parametrized tensor a node computes;
    written by `prepare_for_xnnpack`'s marking classes (``rewriter/_marking.py``)
    through ``torch.fx.traceback.annotate``, read by the analysis (`site_of`) for names
    in reasons and `explain`.
  - ``xnnfold_preserved`` (`PRESERVED_META_KEY`): an ATen node kept undecomposed for a
    fold; written by the decomposition filter (`mark_preserved`,
    ``passes/partition/_decompositions.py``), read once per call by the partitioner
    (`kept_for_folds`). The decompositions rename the nodes they keep
    (``_weight_norm_3`` becomes ``aten__weight_norm_default_3``); torch's provenance
    (``meta["from_node"]``) names the decomposed pieces of a node after it too, and only
    by an ATen graph's ``id``, so the mark is how partitioning finds the kept nodes.

The other keys are torch's (`VAL_META_KEY`, `NN_MODULE_STACK_META_KEY`,
`STACK_TRACE_META_KEY`), read only.
"""

from __future__ import annotations

from typing import Final, Optional

__all__ = [
    "CUSTOM_META_KEY",
    "DELEGATION_TAG_META_KEY",
    "EXTERNAL_CONSTANT_TAG",
    "EXTERNAL_TAG_KEYS",
    "FOLD_META_KEY",
    "NN_MODULE_STACK_META_KEY",
    "PRESERVED_META_KEY",
    "PROVENANCE_META_KEYS",
    "REASON_META_KEY",
    "SITE_META_KEY",
    "STACK_TRACE_META_KEY",
    "VAL_META_KEY",
    "XNNFOLD_TAG_PREFIX",
]

# torch.fx.traceback.annotate writes into node.meta["custom"]; export and the edge
# decompositions copy that dict onto every node they derive from a marked one.
CUSTOM_META_KEY: Final = "custom"
# Inside node.meta["custom"]: "<module path>.<tensor name>" of the parametrized tensor.
SITE_META_KEY: Final = "xnnfold_site"
# On a delegated GEMM with something to fold: its `FoldMark`; on a delegated tanh GELU
# that preprocess computes exactly: a `TanhGeluMark`.
FOLD_META_KEY: Final = "xnnfold_fold"
# Inside node.meta["custom"] of an ATen node the partitioner asked executorch not to
# decompose for a fold: True.
PRESERVED_META_KEY: Final = "xnnfold_preserved"
# On a GEMM left outside the delegates, or delegated with its weight taken at run time:
# its `GemmReason`.
REASON_META_KEY: Final = "xnnfold_reason"

# torch.fx's and executorch's own keys.
VAL_META_KEY: Final = "val"
NN_MODULE_STACK_META_KEY: Final = "nn_module_stack"
STACK_TRACE_META_KEY: Final = "stack_trace"
DELEGATION_TAG_META_KEY: Final = "delegation_tag"
# What every `DELEGATION_TAG_META_KEY` value xnnfold's partitioner writes starts with.
XNNFOLD_TAG_PREFIX: Final = "xnnfold"
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
