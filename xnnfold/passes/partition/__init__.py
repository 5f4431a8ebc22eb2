"""Partitioning: which GEMMs take their computed weight into an XNNPACK delegate.

Whether an argument folds is the shared analysis' decision ladder
(`xnnfold.passes.analysis.decide`, which the ATen plan and the fold pass call too). Here:
`_folding_config` the protocol of an XNNPACK GEMM config that applies it, `_configs` the
four folding GEMM configs, `_findings` what a config finds while it matches one GEMM,
`_matching` the matching repeated to a fixed point, `_facts` what the methods of one
lowering do with each constant (`CrossMethodFacts`), `_asked` the constants a partitioner
was asked about, by FQN, `_aten_plan` the decision made before decomposition,
`_aten_stage` the answers about an ATen program (the facts noted, the ops kept),
`_decompositions` what executorch may decompose, `_grouping` partitions from the matched
groups, `_outcome` the fold marks, reasons and checks written after the final round, and
`_partitioner` executorch's face of the partitioner, which ties them together.
"""
