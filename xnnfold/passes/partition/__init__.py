"""Partitioning: which GEMMs take their computed weight into an XNNPACK delegate.

Whether an argument folds is the shared analysis' decision ladder
(`xnnfold.passes.analysis.decide`, which the ATen plan and the fold pass call too). Here:
`_folding_config` the protocol of an XNNPACK GEMM config that applies it, `_configs` the
four folding GEMM configs, `_findings` what a config finds while it matches one GEMM, `_matching` the matching repeated to a fixed point, `_facts` what the
methods of one lowering do with each constant (`CrossMethodFacts`), `_aten_plan` the
decision made before decomposition, `_grouping` partitions from the matched groups,
`_decompositions` what executorch may decompose, `_outcome` the marks, reasons and checks
written after the final round, and `_partitioner` the partitioner that ties them together.
"""
