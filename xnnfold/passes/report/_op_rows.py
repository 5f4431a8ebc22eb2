"""The rows of `explain` for ops other than GEMMs: each tanh GELU computed exactly inside a
delegate (its `TanhGeluMark`), and each op left on portable for an argument XNNPACK
would compute unlike eager (its `GemmReason`, XNF520 on)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram

from xnnfold._upstream import schema_of
from xnnfold.passes._marks import reason_of, tanh_gelu_mark_of
from xnnfold.passes._ops import GEMM_ARGS_BY_NAME
from xnnfold.passes.analysis import op_overload
from xnnfold.passes.report._reasons import module_path

__all__ = ["ExactGeluRow", "OpRow", "exact_gelu_rows", "op_rows"]


@dataclass(frozen=True)
class ExactGeluRow:
    """A ``gelu(approximate="tanh")`` computed as tanh GELU inside a delegate, where the
    installed XNNPACK serializer would have written it as exact GELU (docs/limits.md).

    Attributes:
        method: the method's name.
        node: the GELU's node name.
        module: path of the module that called it ("<root>" for the model itself).
        backend: the delegate's backend id.
    """

    method: str
    node: str
    module: str
    backend: str


@dataclass(frozen=True)
class OpRow:
    """An op other than a GEMM that the partitioner left on the portable kernels because
    XNNPACK computes its arguments differently from eager (XNF520 on, docs/reasons.md).

    Attributes:
        method: the method's name.
        node: the op's node name.
        op: the op ("avg_pool2d", "upsample_bilinear2d").
        module: path of the module that called it ("<root>" for the model itself).
        reason: what XNNPACK would compute differently.
        code: the stable code of the rule (XNF5xx).
    """

    method: str
    node: str
    op: str
    module: str
    reason: str
    code: str


def exact_gelu_rows(method: str, ep: ExportedProgram) -> Iterator[ExactGeluRow]:
    """The tanh GELUs of ``ep``'s delegates that preprocess computed exactly."""
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not executorch_call_delegate:
            continue
        lowered = getattr(ep.graph_module, str(node.args[0].target))
        inner = getattr(lowered, "original_module", None)
        for inner_node in inner.graph.nodes if inner is not None else ():
            if tanh_gelu_mark_of(inner_node) is not None:
                yield ExactGeluRow(
                    method, inner_node.name, module_path(inner_node), lowered.backend_id
                )


def op_rows(method: str, ep: ExportedProgram) -> Iterator[OpRow]:
    """The ops other than GEMMs left outside the delegates with a reason."""
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        reason = reason_of(node)
        op = op_overload(node.target)
        if reason is None or op is None:
            continue
        name = schema_of(op).name.split("::")[-1]
        if name in GEMM_ARGS_BY_NAME:
            continue  # a GEMM's row is `explain`'s own
        yield OpRow(method, node.name, name, module_path(node), reason.text, reason.code)
