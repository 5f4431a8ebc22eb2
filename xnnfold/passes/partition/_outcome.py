"""What the partitioner writes onto a program it partitioned, from the values its final
round found, and nothing else does: the one fold mark of each delegated GEMM with something
to fold, which the fold pass reads inside its delegate (`write_fold_marks`), why each GEMM
outside a delegate or taking its weight at run time is so (`record_reasons`, for `explain`,
with a warning when a weight computed from parameters stays on portable), and the check
that every op kept undecomposed for a fold landed in a delegate. Nothing here reads back
what it wrote: each function takes the stage's values (`Findings`, the partitioned node
names, the tables found tied) and writes its own keys only.
"""

from __future__ import annotations

import itertools
import logging
from types import MappingProxyType
from typing import AbstractSet, Final, Mapping, Optional, Sequence

from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._meta import FOLD_META_KEY, REASON_META_KEY
from xnnfold.passes._graph_walk import walk
from xnnfold.passes._marks import FoldMark, GemmReason, TanhGeluMark
from xnnfold.passes._ops import EDGE_GEMM_ARGS, QUANTIZATION_NAMESPACES
from xnnfold.passes._options import FoldOptions
from xnnfold.passes._reason_codes import BEYOND_BUDGET, Problem, ReasonCode, STOCK
from xnnfold.passes.analysis import is_gemm, op_overload, Rejection, UntiedTable
from xnnfold.passes.partition._findings import Findings
from xnnfold.passes.report._reasons import module_path, reads_parameters

__all__ = [
    "PARTITIONER_LOGGER",
    "check_preserved_were_delegated",
    "fold_mark",
    "gemm_reason",
    "record_reasons",
    "write_fold_marks",
]

# The logger of every warning the partitioner gives, wherever it is written: the name
# users configure and filter by, which stays when the modules behind it move.
PARTITIONER_LOGGER: Final = "xnnfold.passes.partition._partitioner"
NO_OP_PROBLEMS: Final[Mapping[str, Problem]] = MappingProxyType({})
logger = logging.getLogger(PARTITIONER_LOGGER)


def fold_mark(name: str, findings: Findings, options: FoldOptions) -> Optional[FoldMark]:
    """The fold mark of GEMM ``name`` from the final round's ``findings``: the arguments
    to fold and addmm's scales, decided with ``options``, and what each fold that grows
    the program adds; None when it has nothing to fold."""
    folded = findings.folds.get(name) or {}
    scales = findings.scales.get(name) or {}
    if not folded and not scales:
        return None
    growth = findings.growth.get(name) or {}
    return FoldMark(
        options,
        tuple(folded.items()),
        tuple(scales.items()),
        tuple((index, *grown) for index, grown in growth.items() if index in folded),
    )


def write_fold_marks(
    ep: ExportedProgram,
    findings: Findings,
    options: FoldOptions,
    delegated: AbstractSet[str],
    *,
    tanh_gelus: AbstractSet[str] = frozenset(),
) -> None:
    """Write the fold mark (`fold_mark`) onto each GEMM of ``delegated`` (the partitioned
    nodes, by name) with something to fold, for the fold pass inside its delegate and
    `explain`, and a `TanhGeluMark` onto each of ``tanh_gelus`` (delegated tanh GELUs the
    installed serializer would write as exact GELU); a mark a node carries from before
    (copied metadata) goes first. Warns once per argument folded although its sources
    stay in the program for another reader."""
    for node in ep.graph.nodes:
        node.meta.pop(FOLD_META_KEY, None)
        mark = fold_mark(node.name, findings, options) if node.name in delegated else None
        if mark is not None:
            node.meta[FOLD_META_KEY] = mark
        elif node.name in tanh_gelus and node.name in delegated:
            node.meta[FOLD_META_KEY] = TanhGeluMark()
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
    delegated: AbstractSet[str],
    written_buffers: frozenset[str],
    options: FoldOptions,
) -> None:
    """Raise when an op kept undecomposed to fold a weight (a node of ``kept``) is not
    among the ``delegated`` nodes: it has no portable kernel, so the program could not
    run."""
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.name in kept and node.name not in delegated:
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


def record_reasons(
    ep: ExportedProgram,
    *,
    delegated: AbstractSet[str],
    stock_reasons: Mapping[str, str],
    findings: Findings,
    untied: Sequence[UntiedTable] = (),
    op_problems: Mapping[str, Problem] = NO_OP_PROBLEMS,
) -> None:
    """Write onto each GEMM outside a delegate, or delegated with a weight taken at run
    time, why (`gemm_reason`), for `explain`: the one writer of reasons. A reason a node
    carries from before goes first. Warns about each GEMM left on portable for an
    argument XNNPACK cannot compute, or with a weight computed from parameters.

    Args:
        delegated: the partitioned nodes, by name.
        stock_reasons: the stock configs' reasons, by GEMM name (`collect_why_reasons`).
        findings: what the final matching round found.
        untied: the tables a delegated linear and an op outside it both read, each
            stored twice (`find_tied_tables`, with ``tie_tables``).
        op_problems: the other ops left outside for an argument XNNPACK computes
            differently from eager, by name (`argument_declines`, which warns).
    """
    declined: dict[str, Rejection] = {}
    for (gemm, _), rejection in findings.rejections.items():
        declined.setdefault(gemm.name, rejection)
    tables: dict[str, UntiedTable] = {}
    for table in untied:
        tables.setdefault(table.gemm, table)
    for node in ep.graph.nodes:
        node.meta.pop(REASON_META_KEY, None)
        if node.name in op_problems:
            problem = op_problems[node.name]
            node.meta[REASON_META_KEY] = GemmReason(str(problem), problem.code.code)
        if not is_gemm(node):
            continue
        inside = node.name in delegated
        reason = gemm_reason(
            node.name,
            delegated=inside,
            rejection=declined.get(node.name),
            problem=findings.argument_problems.get(node.name),
            stock_reason=stock_reasons.get(node.name),
            untied=tables.get(node.name),
            growth=findings.growth.get(node.name) or {},
        )
        if reason is None:
            continue
        node.meta[REASON_META_KEY] = reason
        if not inside:
            _warn_on_portable(node, ep, findings, declined.get(node.name), reason.code)


def gemm_reason(
    name: str,
    *,
    delegated: bool,
    rejection: Optional[Rejection],
    problem: Optional[Problem],
    stock_reason: Optional[str],
    untied: Optional[UntiedTable],
    growth: Mapping[int, tuple[int, str]],
) -> Optional[GemmReason]:
    """Why GEMM ``name`` is where it is, from what the stage found, in order: inside a
    delegate, its weight taken at run time (``rejection``), else a table stored twice
    (``untied``, XNF517); outside, an argument XNNPACK cannot compute (``problem``), a
    declined computed argument (``rejection``), else the stock config's reason. None
    when nothing needs saying. For the growth budget's decline (XNF516), the ``growth``
    its folds would have added."""
    if delegated:
        if rejection is not None:
            # Delegated with a weight XNNPACK reads at run time (fully-connected ops take
            # one): correct and fast, but not folded; say why.
            text = f"its {rejection.role} is computed at run time, not folded: {rejection.reason}"
            return GemmReason(text, rejection.code.code)
        if untied is not None:
            return GemmReason(f"{untied.code.summary} ({untied.fqn})", untied.code.code)
        return None
    code: ReasonCode
    if problem is not None:
        text, code = str(problem), problem.code
    elif rejection is not None:
        text, code = f"its {rejection.role} is not folded: {rejection.reason}", rejection.code
    elif stock_reason is not None:
        text, code = stock_reason, STOCK
    else:
        return None
    grown = (
        tuple((index, *grew) for index, grew in growth.items())
        if code.code == BEYOND_BUDGET.code
        else ()
    )
    return GemmReason(text, code.code, grown)


def _warn_on_portable(
    node: Node,
    ep: ExportedProgram,
    findings: Findings,
    rejection: Optional[Rejection],
    code: str,
) -> None:
    problem = findings.argument_problems.get(node.name)
    if problem is not None:
        logger.warning(
            "xnnfold: GEMM '%s' in module '%s' stays on the portable kernels: %s [%s]",
            node.name,
            module_path(node),
            problem,
            code,
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
            code,
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
