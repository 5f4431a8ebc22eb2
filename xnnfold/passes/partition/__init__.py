"""Partitioning: which GEMMs take their computed weight into an XNNPACK delegate.

The rules that decide "foldable" and the per-argument audit of each GEMM are the shared
analysis (`xnnfold.passes.analysis`, which the fold pass reads too). Here: `_configs` the
XNNPACK GEMM configs that apply them, `_aten_plan` the decision made before
decomposition, `_facts` what the methods of one lowering do with each constant,
`_grouping` the cycle-free grouping of partitions, `_decompositions` what executorch may
decompose, and `_partitioner` the partitioner that ties them together.
"""
