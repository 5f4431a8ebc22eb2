"""Programs the differential campaign found failing, one module each, as grammar
descriptions (`tests.support.grammar`): ``tests/end_to_end/test_differential.py`` checks
each one with the oracles it failed."""

from __future__ import annotations

from tests.support.reproducers.declined_gemm_shares_a_packed_source import (
    declined_gemm_shares_a_packed_source,
)
from tests.support.reproducers.gemm_inside_a_bias_computation import (
    gemm_inside_a_bias_computation,
)
from tests.support.reproducers.kept_ops_beside_a_source_another_method_stores import (
    kept_ops_beside_a_source_another_method_stores,
)
from tests.support.reproducers.portable_gemm_keeps_its_bias import portable_gemm_keeps_its_bias
from tests.support.reproducers.run_time_weight_behind_an_identity_permute import (
    run_time_weight_behind_an_identity_permute,
)
from tests.support.reproducers.shared_2d_kernel import shared_2d_kernel
from tests.support.reproducers.source_another_partition_holds import (
    source_another_partition_holds,
)

__all__ = [
    "declined_gemm_shares_a_packed_source",
    "gemm_inside_a_bias_computation",
    "kept_ops_beside_a_source_another_method_stores",
    "portable_gemm_keeps_its_bias",
    "run_time_weight_behind_an_identity_permute",
    "shared_2d_kernel",
    "source_another_partition_holds",
]
