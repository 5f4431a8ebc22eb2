"""Partitioning: which GEMMs take their computed weight into an XNNPACK delegate.

The rules that decide "foldable" and the per-argument audit of each GEMM are the shared
analysis (`xnnfold.passes.analysis`, which the fold pass reads too). Here: `_configs` the
XNNPACK GEMM configs that apply them, `_context` what those configs are built with and
what they report, `_matching` the matching repeated to a fixed point, `_facts` what the
methods of one lowering do with each constant, `_aten_plan` the decision made before
decomposition, `_grouping` the cycle-free grouping of partitions, `_decompositions` what
executorch may decompose, `_outcome` the reasons and checks written after partitioning,
and `_partitioner` the partitioner that ties them together.
"""
