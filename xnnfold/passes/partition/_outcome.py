"""What the partitioner writes onto a program it partitioned, from the final matching's
values, and nothing else does: the fold marks the fold pass reads inside each delegate
(`write_marks`), why each GEMM left outside a delegate stays there (`record_reasons`, for
`explain`, with a warning when its weight is computed from parameters), and the check
that every op kept undecomposed for a fold landed in a delegate.
"""

from __future__ import annotations

import itertools
import logging
from typing import Final, Optional

from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import (
    DELEGATION_TAG_META_KEY,
    FOLD_META_KEY,
    FOLD_OPTIONS_META_KEY,
    FOLD_SCALES_META_KEY,
    GROWTH_META_KEY,
    PARTITION_MARK_KEYS,
    REASON_CODE_META_KEY,
    REASON_META_KEY,
)
from xnnfold.passes._codes import STOCK
from xnnfold.passes._ops import EDGE_GEMM_ARGS, QUANTIZATION_NAMESPACES
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._walk import walk
from xnnfold.passes.analysis import is_gemm, op_overload, Rejection
from xnnfold.passes.partition._findings import Findings
from xnnfold.passes.report._reasons import module_path, reads_parameters

__all__ = ["PARTITIONER_LOGGER", "check_preserved_were_delegated", "record_reasons", "write_marks"]

# The logger of every warning the partitioner gives, wherever it is written: the name
# users configure and filter by, which stays when the modules behind it move.
PARTITIONER_LOGGER: Final = "xnnfold.passes.partition._partitioner"
logger = logging.getLogger(PARTITIONER_LOGGER)


def write_marks(ep: ExportedProgram, findings: Findings, options: FoldOptions) -> None:
    """Write the final round's folds onto its GEMMs, for the fold pass and `explain`:
    the arguments to fold and addmm's scales, with the options they were decided with,
    and what each fold that grows the program adds. Marks a node carries from before
    (copied metadata) are cleared first. Warns once per argument folded although its
    sources stay in the program for another reader."""
    for node in ep.graph.nodes:
        for key in PARTITION_MARK_KEYS:
            node.meta.pop(key, None)
        folded = findings.folds.get(node.name)
        scales = findings.scales.get(node.name)
        growth = findings.growth.get(node.name)
        if folded:
            node.meta[FOLD_META_KEY] = dict(folded)
        if scales:
            node.meta[FOLD_SCALES_META_KEY] = dict(scales)
        if folded or scales:
            node.meta[FOLD_OPTIONS_META_KEY] = options
        if growth:
            node.meta[GROWTH_META_KEY] = dict(growth)
    for gemm, index, role in sorted(findings.stored_twice):
        if index in findings.folds.get(gemm, {}):
            logger.warning(
                "xnnfold: the %s of GEMM '%s' is folded although its sources are also kept "
                "for another reader (another method, or a GEMM that does not fold them), so "
                "the program stores both",
                role,
                gemm,
            )


def check_preserved_were_delegated(
    ep: ExportedProgram,
    kept: frozenset[str],
    written_buffers: frozenset[str],
    options: FoldOptions,
) -> None:
    """Raise when an op kept undecomposed to fold a weight (a node of ``kept``) ended up
    outside every delegate: it has no portable kernel, so the program could not run."""
    for node in ep.graph.nodes:
        if (
            node.op == "call_function"
            and node.name in kept
            and DELEGATION_TAG_META_KEY not in node.meta
        ):
            written = _written_buffers_read_by(node, ep, written_buffers, options)
            if written:
                # The kept op was chosen before a later method showed that it writes
                # this buffer; the decompositions cannot be redone at this point.
                raise RuntimeError(
                    f"xnnfold kept '{node.name}' ({node.target}) undecomposed to fold "
                    f"its GEMM's weight, but another method writes the buffer "
                    f"{written[0]} it reads, so the weight is not folded and '{node.name}' "
                    "has no portable kernel. Pass the methods that write buffers before "
                    "the methods that read them to to_edge_transform_and_lower."
                )
            raise RuntimeError(
                f"xnnfold kept '{node.name}' ({node.target}) undecomposed so that its "
                "GEMM's weight could be folded, but the GEMM was not delegated, and no "
                "portable kernel exists for it. Lower this model with "
                "XnnpackFoldingPartitioner(fold=False) and report the model."
            )


def _written_buffers_read_by(
    node: Node, ep: ExportedProgram, written_buffers: frozenset[str], options: FoldOptions
) -> list[str]:
    """FQNs of written buffers that the weights and biases ``node`` feeds read."""
    # Bounded like a weight computation: at most max_fold_nodes + 1 nodes each way.
    bound = options.max_fold_nodes + 1

    def positions(current: Node) -> Optional[tuple[int, ...]]:
        return EDGE_GEMM_ARGS.get(current.target) if current.op == "call_function" else None

    def users_up_to_gemms(current: Node) -> list[Node]:
        return [] if positions(current) is not None else list(current.users)

    weights: list[Node] = []
    for current in itertools.islice(walk([node], users_up_to_gemms), bound):
        for index in positions(current) or ():
            arg = current.args[index] if index < len(current.args) else None
            if isinstance(arg, Node):
                weights.append(arg)
    found: list[str] = []
    reads = walk(weights, lambda current: current.all_input_nodes)
    for current in itertools.islice(reads, bound):
        fqn = ep.graph_signature.inputs_to_buffers.get(current.name)
        if current.op == "placeholder" and fqn in written_buffers:
            found.append(fqn)
    return found


def record_reasons(ep: ExportedProgram, stock_reasons: dict[str, str], findings: Findings) -> None:
    """Write onto each GEMM left outside a delegate why (for `explain`), and warn
    about the ones whose weight or bias is computed from parameters."""
    declined: dict[Node, Rejection] = {}
    rejection: Optional[Rejection]  # annotation only: reassigned from declined.get below
    for (gemm, _), rejection in findings.rejections.items():
        declined.setdefault(gemm, rejection)
    for node in ep.graph.nodes:
        if not is_gemm(node):
            continue
        rejection = declined.get(node)
        if DELEGATION_TAG_META_KEY in node.meta:
            if rejection is not None:
                # Delegated with a weight XNNPACK reads at run time (fully-connected
                # ops take one): correct and fast, but not folded; say why.
                node.meta[REASON_META_KEY] = (
                    f"its {rejection.role} is computed at run time, not folded: {rejection.reason}"
                )
                node.meta[REASON_CODE_META_KEY] = rejection.code.code
            continue
        problem = findings.argument_problems.get(node.name)
        reason = (
            problem
            if problem is not None
            else f"its {rejection.role} is not folded: {rejection.reason}"
            if rejection is not None
            else stock_reasons.get(node.name)
        )
        if reason is None:
            continue
        code = (
            problem.code
            if problem is not None
            else rejection.code
            if rejection is not None
            else STOCK
        )
        node.meta[REASON_META_KEY] = reason
        node.meta[REASON_CODE_META_KEY] = code.code
        if problem is not None:
            logger.warning(
                "xnnfold: GEMM '%s' in module '%s' stays on the portable kernels: %s [%s]",
                node.name,
                module_path(node),
                problem,
                code.code,
            )
        elif rejection is not None and _worth_a_warning(rejection, ep):
            where = f" (computed by {rejection.site})" if rejection.site else ""
            logger.warning(
                "xnnfold: GEMM '%s' in module '%s' stays on the portable kernels: "
                "its %s%s is not folded because %s [%s]",
                node.name,
                module_path(node),
                rejection.role,
                where,
                rejection.reason,
                code.code,
            )


def _worth_a_warning(rejection: Rejection, ep: ExportedProgram) -> bool:
    # A weight computed from parameters is one the user expects to be static; an
    # activation operand (attention's k.T) is not news and would drown the rest.
    if rejection.computed_from_constants or rejection.site is not None:
        return True
    root = rejection.gemm.args[rejection.arg_index]
    if not isinstance(root, Node):
        return False
    op = op_overload(root.target)
    if op is not None and op.namespace in QUANTIZATION_NAMESPACES:
        # A quantized weight: whether it is delegated is the stock config's call.
        return False
    return reads_parameters(root, ep)
