"""Stable codes for every reason a GEMM is not folded or not delegated (XNF5xx).

Every reason the folding partitioner gives carries one, as the codemod's findings carry
theirs (XNF1xx to XNF4xx), so that a user can grep a log for one, filter `explain` rows by
one, or look one up in docs/reasons.md. The code names the rule that decided; the reason
text beside it says what was seen. Both families are registered in one registry
(`xnnfold._code_registry`), which refuses a code or a name used before.
"""

from __future__ import annotations

from typing import Final

from xnnfold._code_registry import family, ReasonCode
from xnnfold._code_registry import register as _code

__all__ = [
    "CODES",
    "Problem",
    "ReasonCode",
]


class Problem(str):
    """A reason text that carries its `ReasonCode`: reads and formats as the text."""

    code: ReasonCode

    def __new__(cls, code: ReasonCode, text: str) -> Problem:
        problem = super().__new__(cls, text)
        problem.code = code
        return problem

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.code, str(self)))


# The predicate's rules (a computed weight or bias that is not folded).
RUN_TIME: Final = _code(
    "XNF501", "run-time", "the argument is computed at run time, not from constants alone"
)
TOO_MANY_NODES: Final = _code(
    "XNF502", "too-many-nodes", "the computation has more nodes than max_fold_nodes"
)
EXTERNAL_DATA: Final = _code(
    "XNF503", "external-data", "a source is stored in an external data file (.ptd)"
)
OTHER_READER: Final = _code(
    "XNF504",
    "other-reader",
    "a source or intermediate is also read by something other than a GEMM weight",
)
SHARED_TOO_WIDE: Final = _code(
    "XNF505",
    "shared-too-wide",
    "the sources are shared with more weight computations than the budget allows",
)
SHARED_NOT_FOLDED: Final = _code(
    "XNF506",
    "shared-not-folded",
    "it reads a computation that is not folded, because that one feeds something else",
)
DYNAMIC_SHAPE: Final = _code("XNF507", "dynamic-shape", "the computed tensor has a dynamic shape")
GROWS_PROGRAM: Final = _code(
    "XNF508", "grows-program", "the folded tensor would take more bytes than it frees"
)
WRITTEN_ELSEWHERE: Final = _code(
    "XNF509", "written-elsewhere", "it reads a buffer another method of the program writes"
)
# The GEMM's own arguments (the stock configs would lower it wrongly or not at all).
WRITTEN_BUFFER: Final = _code(
    "XNF510", "written-buffer", "its weight or bias is a buffer the program writes"
)
ADDMM_SCALES: Final = _code(
    "XNF511", "addmm-scales", "addmm's beta or alpha cannot be applied by XNNPACK here"
)
ADDMM_BIAS_SHAPE: Final = _code(
    "XNF512", "addmm-bias-shape", "addmm's bias is not one value per output channel"
)
OUTPUT_PADDING: Final = _code(
    "XNF513", "output-padding", "a transposed convolution's output_padding is not below its stride"
)
SHARED_KERNEL: Final = _code(
    "XNF514", "shared-kernel", "a convolution's stored kernel is also read by another op"
)
PERMUTED_WEIGHT: Final = _code(
    "XNF515",
    "permuted-weight",
    "a run-time weight is a permute that is not a transpose (XNNPACK would read it as one)",
)
BEYOND_BUDGET: Final = _code(
    "XNF516",
    "beyond-budget",
    "a fold that grows the program would take more bytes than growth_budget leaves",
)
# A tied table (a delegated GEMM's weight the program also reads) that stays stored twice.
TIED_OTHER_USE: Final = _code(
    "XNF517",
    "tied-other-use",
    "a table the program reads is stored twice: the delegate also reads it otherwise than "
    "as a linear's own weight",
)
# A non-GEMM op whose arguments XNNPACK computes differently from eager
# (`partition/_argument_checks.py`), left on portable.
POOL_DIVISOR_PADDING: Final = _code(
    "XNF520",
    "pool-divisor-padding",
    "avg_pool2d's divisor_override on a padded window that leaves the padding out",
)
RESIZE_SCALE: Final = _code(
    "XNF521",
    "resize-scale",
    "upsample_bilinear2d's scale factors are not the ratio of its output and input sizes",
)
MAX_DIM_ARGUMENTS: Final = _code(
    "XNF522",
    "max-dim-arguments",
    "max.dim over a dim XNNPACK's serializer refuses (not 2 or 3 as written) or without keepdim",
)
# The stock XNNPACK config's own reason (dtype, rank, options ...), passed on as it is.
STOCK: Final = _code("XNF590", "stock", "executorch's XNNPACK config declined the GEMM")

# The reason codes, by code.
CODES: Final = family("XNF5")
