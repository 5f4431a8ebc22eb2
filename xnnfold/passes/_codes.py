"""Stable codes for every reason a GEMM is not folded or not delegated (XNF2xx).

The codemod's findings carry codes (XNF1xx, XNF4xx); so does every reason the folding
partitioner gives, so that a user can grep a log for one, filter `explain` rows by one, or
look one up in docs/reasons.md. The code names the rule that decided; the reason text
beside it says what was seen. Codes are never reused or renumbered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "CODES",
    "Problem",
    "ReasonCode",
]


@dataclass(frozen=True)
class ReasonCode:
    code: str
    name: str
    summary: str


class Problem(str):
    """A reason text that carries its `ReasonCode`: reads and formats as the text."""

    code: ReasonCode

    def __new__(cls, code: ReasonCode, text: str) -> Problem:
        problem = super().__new__(cls, text)
        problem.code = code
        return problem

    def __reduce__(self) -> tuple[object, ...]:  # copy and pickle keep the code
        return (Problem, (self.code, str(self)))


def _code(code: str, name: str, summary: str) -> ReasonCode:
    found = ReasonCode(code, name, summary)
    CODES[code] = found
    return found


CODES: Final[dict[str, ReasonCode]] = {}

# The predicate's rules (a computed weight or bias that is not folded).
RUN_TIME: Final = _code(
    "XNF201", "run-time", "the argument is computed at run time, not from constants alone"
)
TOO_MANY_NODES: Final = _code(
    "XNF202", "too-many-nodes", "the computation has more nodes than max_fold_nodes"
)
EXTERNAL_DATA: Final = _code(
    "XNF203", "external-data", "a source is stored in an external data file (.ptd)"
)
OTHER_READER: Final = _code(
    "XNF204",
    "other-reader",
    "a source or intermediate is also read by something other than a GEMM weight",
)
SHARED_TOO_WIDE: Final = _code(
    "XNF205",
    "shared-too-wide",
    "the sources are shared with more weight computations than the budget allows",
)
SHARED_NOT_FOLDED: Final = _code(
    "XNF206",
    "shared-not-folded",
    "it reads a computation that is not folded, because that one feeds something else",
)
DYNAMIC_SHAPE: Final = _code("XNF207", "dynamic-shape", "the computed tensor has a dynamic shape")
GROWS_PROGRAM: Final = _code(
    "XNF208", "grows-program", "the folded tensor would take more bytes than it frees"
)
WRITTEN_ELSEWHERE: Final = _code(
    "XNF209", "written-elsewhere", "it reads a buffer another method of the program writes"
)
# The GEMM's own arguments (the stock configs would lower it wrongly or not at all).
WRITTEN_BUFFER: Final = _code(
    "XNF210", "written-buffer", "its weight or bias is a buffer the program writes"
)
ADDMM_SCALES: Final = _code(
    "XNF211", "addmm-scales", "addmm's beta or alpha cannot be applied by XNNPACK here"
)
ADDMM_BIAS_SHAPE: Final = _code(
    "XNF212", "addmm-bias-shape", "addmm's bias is not one value per output channel"
)
OUTPUT_PADDING: Final = _code(
    "XNF213", "output-padding", "a transposed convolution's output_padding is not below its stride"
)
SHARED_KERNEL: Final = _code(
    "XNF214", "shared-kernel", "a convolution's stored kernel is also read by another op"
)
PERMUTED_WEIGHT: Final = _code(
    "XNF215",
    "permuted-weight",
    "a run-time weight is a permute that is not a transpose (XNNPACK would read it as one)",
)
# The stock XNNPACK config's own reason (dtype, rank, options ...), passed on as it is.
STOCK: Final = _code("XNF290", "stock", "executorch's XNNPACK config declined the GEMM")
