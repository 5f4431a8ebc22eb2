"""The analysis the stages share: what a GEMM argument is computed from, and whether it folds.

The partitioner's configs, its ATen plan and the fold pass ask one function whether an
argument folds: `decide`, the decision ladder (`_verdict`), which applies the predicate
(`find_weight_computation`) with what each stage knows, so "delegated" and "folded"
cannot disagree. Beside it: the per-argument rules XNNPACK's GEMMs impose
(`_arguments`), the growth budget's per-method ledger (`_growth`), and the small node
helpers and analysis caches they are built on. This package imports none of the stages
(`tests/architecture/test_passes_layers.py`), and only it calls the predicate.
"""

from xnnfold.passes.analysis._arguments import (
    ADDMM_BIAS,
    addmm_problem,
    addmm_scales,
    ADDMM_WEIGHT,
    deconvolution_problem,
    is_matrix_transpose,
    permuted_weight_problem,
    shared_kernel_problem,
)
from xnnfold.passes.analysis._cache import AnalysisCache, new_analysis_cache
from xnnfold.passes.analysis._constants import (
    constant_computation,
    input_dependent,
    is_constant_node,
    is_constant_source,
    stored_constants,
)
from xnnfold.passes.analysis._growth import growth_of, noted_growth, program_bytes
from xnnfold.passes.analysis._growth import node_bytes as value_bytes
from xnnfold.passes.analysis._nodes import (
    arg_role,
    constant_fqns,
    constant_tensor,
    external_tag,
    gemm_positions,
    is_float32,
    is_gemm,
    op_overload,
    site_of,
)
from xnnfold.passes.analysis._predicates import find_weight_computation
from xnnfold.passes.analysis._results import Growth, Rejection, WeightComputation
from xnnfold.passes.analysis._structure import computation_key
from xnnfold.passes.analysis._tied_tables import (
    find_tied_tables,
    read_only_as_linear_weight,
    table_uses,
    TableUses,
    TiedTable,
    TiedTables,
    UntiedTable,
)
from xnnfold.passes.analysis._verdict import (
    decide,
    Decision,
    FIRST_ROUND,
    NO_FACTS,
    ProgramFacts,
    RoundDecisions,
    Stage,
    Verdict,
    written_elsewhere,
)

__all__ = [
    "ADDMM_BIAS",
    "ADDMM_WEIGHT",
    "AnalysisCache",
    "Decision",
    "FIRST_ROUND",
    "Growth",
    "NO_FACTS",
    "ProgramFacts",
    "Rejection",
    "RoundDecisions",
    "Stage",
    "Verdict",
    "TableUses",
    "TiedTable",
    "TiedTables",
    "UntiedTable",
    "WeightComputation",
    "addmm_problem",
    "addmm_scales",
    "arg_role",
    "computation_key",
    "constant_computation",
    "constant_fqns",
    "constant_tensor",
    "decide",
    "deconvolution_problem",
    "external_tag",
    "find_tied_tables",
    "find_weight_computation",
    "gemm_positions",
    "growth_of",
    "input_dependent",
    "is_constant_node",
    "is_constant_source",
    "is_float32",
    "is_gemm",
    "is_matrix_transpose",
    "new_analysis_cache",
    "noted_growth",
    "op_overload",
    "permuted_weight_problem",
    "program_bytes",
    "read_only_as_linear_weight",
    "shared_kernel_problem",
    "site_of",
    "stored_constants",
    "table_uses",
    "value_bytes",
    "written_elsewhere",
]
