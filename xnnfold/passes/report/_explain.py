"""`explain`: every GEMM of a lowered program, where it ran and why.

A GEMM left on the portable kernels costs 10x to 400x and says nothing: the stock
partitioner's reasons are DEBUG logs. `explain` reads a lowered program and lists each
convolution, linear, addmm, mm and bmm of each method: inside which delegate, whether its
weight or bias was folded there, the module that called it, and, for one left outside, the
reason the partitioner recorded. It reads the two values the partitioner leaves on a GEMM
(`passes/_marks.py`): its `FoldMark` (what was folded, and the growth it added) and its
`GemmReason` (why not, and for the growth budget's decline what folding would have
added). It also lists each tanh GELU computed exactly inside a delegate where the stock
serializer would compute exact GELU (its `TanhGeluMark`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Iterator, Optional

from executorch.exir import EdgeProgramManager, ExecutorchProgramManager
from executorch.exir.delegate import executorch_call_delegate
from torch.export import ExportedProgram
from torch.fx import Node

from xnnfold._upstream import schema_of
from xnnfold.passes._marks import fold_mark_of, FoldGrowth, reason_of
from xnnfold.passes._ops import GEMM_ARGS_BY_NAME
from xnnfold.passes._reason_codes import BEYOND_BUDGET
from xnnfold.passes.analysis import arg_role, op_overload, site_of
from xnnfold.passes.report._op_rows import exact_gelu_rows, ExactGeluRow, op_rows, OpRow
from xnnfold.passes.report._programs import methods, Program
from xnnfold.passes.report._reasons import module_path
from xnnfold.passes.report._tied_storage import SharedTable, table_copies, TableStoredTwice

__all__ = [
    "ExactGeluRow",
    "ExplainReport",
    "GemmRow",
    "OpRow",
    "SharedTable",
    "TableStoredTwice",
    "explain",
]


_NO_REASON = "no reason recorded: lowered without XnnpackFoldingPartitioner"


@dataclass(frozen=True)
class GemmRow:
    """One GEMM of one method.

    Attributes:
        method: the method's name.
        node: the GEMM's node name.
        op: the op ("convolution", "linear", "addmm", "mm", "bmm").
        module: path of the module that called it ("<root>" for the model itself).
        delegated: inside a delegate.
        backend: the delegate's backend id, None when outside.
        folded: roles ("weight", "bias") computed from parameters and folded into the
            delegate.
        site: the ``prepare_for_xnnpack`` site of a folded or declined computation.
        computed: the weight or bias is computed rather than a stored tensor.
        reason: why a GEMM is outside a delegate, or why a delegated GEMM's computed
            weight was not folded (XNNPACK then reads it at run time).
        code: the stable code of the rule behind ``reason`` (XNF5xx, docs/reasons.md),
            None when there is no reason.
        growth: bytes its folds added to the program (delegated), or would have added
            (left outside by the growth budget, XNF516); None when folding grows nothing.
            Folds that share sources are one group, counted on each of its GEMMs.
        growth_group: the name of that group (`ExplainReport.growth` counts each once).
    """

    method: str
    node: str
    op: str
    module: str
    delegated: bool
    backend: Optional[str]
    folded: tuple[str, ...]
    site: Optional[str]
    computed: bool
    reason: Optional[str]
    code: Optional[str] = None
    growth: Optional[int] = None
    growth_group: Optional[str] = None


@dataclass(frozen=True)
class ExplainReport:
    """Every GEMM of a lowered program; ``str(report)`` is a printable table.

    ``exact_gelus`` lists the tanh GELUs computed exactly inside a delegate
    (`ExactGeluRow`), ``ops`` the ops other than GEMMs left on portable because XNNPACK
    would compute their arguments unlike eager (`OpRow`). ``shared`` lists the tied tables
    the program stores once (`SharedTable`: a constant a delegated linear takes as its
    weight and the program also reads, in one ``.ptd``);
    ``stored_twice`` those it stores twice, in the program and in a delegate
    (`TableStoredTwice`), which ``tie_tables=True`` would store once.
    """

    rows: tuple[GemmRow, ...]
    shared: tuple[SharedTable, ...] = ()
    stored_twice: tuple[TableStoredTwice, ...] = ()
    exact_gelus: tuple[ExactGeluRow, ...] = ()
    ops: tuple[OpRow, ...] = ()

    @property
    def bytes_saved(self) -> int:
        """Bytes the tied tables stored once save (each table once)."""
        return sum({table.fqn: table.nbytes for table in self.shared}.values())

    @property
    def bytes_tying_would_save(self) -> int:
        """Bytes ``tie_tables=True`` would save by storing each table of
        ``stored_twice`` once (each table once)."""
        return sum({table.fqn: table.nbytes for table in self.stored_twice}.values())

    @property
    def outside(self) -> tuple[GemmRow, ...]:
        """GEMMs left outside any delegate (on the portable kernels)."""
        return tuple(r for r in self.rows if not r.delegated)

    @property
    def folded(self) -> tuple[GemmRow, ...]:
        """GEMMs whose computed weight or bias was folded inside a delegate."""
        return tuple(r for r in self.rows if r.folded)

    @property
    def growth(self) -> int:
        """Bytes the folds that grow the program added to it (each group once)."""
        groups = {(r.method, r.growth_group): r.growth for r in self.rows if r.delegated}
        return sum(bytes_ or 0 for bytes_ in groups.values())

    def table(self) -> str:
        """One line per GEMM; a "growth" column (bytes added, or that the growth
        budget refused) when some fold grows the program."""
        grows = any(r.growth is not None for r in self.rows)
        header = ("method", "gemm", "op", "module", "where", "folded", *grows * ("growth",))
        header += ("reason",)
        lines = [
            (
                r.method,
                r.node,
                r.op,
                r.module,
                r.backend if r.delegated and r.backend else "portable",
                ", ".join(r.folded) or ("-" if not r.computed else "no"),
                *grows * (f"+{r.growth}" if r.growth is not None else "",),
                f"{r.code}: {r.reason}" if r.code and r.reason else r.reason or "",
            )
            for r in self.rows
        ]
        widths = [
            max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
            for i, h in enumerate(header)
        ]

        def fmt(cells: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

        out = [fmt(header), fmt(tuple("-" * w for w in widths))]
        out += [fmt(line) for line in lines]
        outside = len(self.outside)
        out.append(
            f"{len(self.rows)} GEMMs: {len(self.rows) - outside} delegated "
            f"({len(self.folded)} with folded weights), {outside} on portable"
        )
        for table in self.shared:
            out.append(
                f"tied table {table.fqn} ({table.method}): stored once in {table.file}.ptd "
                f"for the program and its delegate, {table.nbytes:,} bytes saved"
            )
        for twice in self.stored_twice:
            out.append(
                f"tied table {twice.fqn} ({twice.method}): stored twice, for the program and "
                f"for a delegate; tie_tables=True stores it once, saving {twice.nbytes:,} "
                "bytes, in a .ptd the .pte then loads with (docs/tied-tables.md)"
            )
        if self.exact_gelus:
            out.append(
                f"{len(self.exact_gelus)} tanh GELUs computed as tanh GELU inside the "
                "delegates: the installed XNNPACK serializer writes gelu(approximate='tanh') "
                "as exact GELU (docs/limits.md)"
            )
        for op in self.ops:
            out.append(
                f"{op.op} '{op.node}' in module '{op.module}' ({op.method}): on portable, "
                f"{op.code}: {op.reason}"
            )
        beyond = sum(r.code == BEYOND_BUDGET.code for r in self.rows)
        if grows:
            out.append(
                f"folds grew the program by {self.growth} bytes (growth_budget); "
                f"{beyond} GEMMs left outside by the budget"
            )
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _gemm_name(node: Node) -> Optional[str]:
    """ "mm" for aten.mm in any dialect or overload (mm.default, mm.out), else None."""
    if node.op != "call_function":
        return None
    op = op_overload(node.target)
    if op is None or op.namespace != "aten":
        return None
    name = schema_of(op).name.split("::")[-1]
    return name if name in GEMM_ARGS_BY_NAME else None


def _positions(node: Node) -> tuple[int, ...]:
    return GEMM_ARGS_BY_NAME[_gemm_name(node) or "bmm"]


def _computed(node: Node, fed: AbstractSet[str] = frozenset()) -> bool:
    """Whether a weight or bias of GEMM ``node`` is computed rather than a stored tensor:
    a node of its graph, or one of the placeholders in ``fed`` (a delegate's inputs the
    top-level program computes, as another delegate's output)."""
    for index in _positions(node):
        arg = node.args[index] if index < len(node.args) else None
        if isinstance(arg, Node) and (arg.op != "placeholder" or arg.name in fed):
            return True
    return False


def _fed_by_computation(inner: ExportedProgram, call: Node) -> frozenset[str]:
    """The placeholders of delegate program ``inner`` whose value its call ``call``
    passes from a computation of the top-level program (not a placeholder there). The
    call's operands after the lowered module are the delegate's user inputs, in order;
    where their counts differ, which input is which is unknown and none is named (the
    delegate's placeholders then read as stored tensors)."""
    names = inner.graph_signature.user_inputs
    operands = call.args[1:]
    if len(names) != len(operands):
        return frozenset()
    return frozenset(
        name
        for name, operand in zip(names, operands)
        if isinstance(operand, Node) and operand.op != "placeholder"
    )


def _growth(noted: tuple[FoldGrowth, ...]) -> tuple[Optional[int], Optional[str]]:
    """The bytes ``noted`` adds, and the group of the first."""
    if not noted:
        return None, None
    return sum(bytes_ for _, bytes_, _ in noted), noted[0][2]


def _delegated_row(method: str, node: Node, backend: str, fed: AbstractSet[str]) -> GemmRow:
    mark = fold_mark_of(node)
    arguments = mark.arguments if mark is not None else ()
    positions = _positions(node)
    folded = tuple(
        arg_role(positions, index) for index in sorted(dict(arguments), key=positions.index)
    )
    site = next((s for _, s in arguments if s), None)
    reason = reason_of(node)
    return GemmRow(
        method,
        node.name,
        _gemm_name(node) or "",
        module_path(node),
        True,
        backend,
        folded,
        site,
        _computed(node, fed) or bool(folded),
        reason.text if reason is not None else None,
        reason.code if reason is not None else None,
        *_growth(mark.growth if mark is not None else ()),
    )


def _outside_row(method: str, node: Node) -> GemmRow:
    computed = _computed(node)
    site = None
    for index in _positions(node):
        arg = node.args[index] if index < len(node.args) else None
        if isinstance(arg, Node):
            site = site or site_of(arg)
    reason = reason_of(node)
    return GemmRow(
        method,
        node.name,
        _gemm_name(node) or "",
        module_path(node),
        False,
        None,
        (),
        site,
        computed,
        (reason.text if reason is not None else None) or _NO_REASON,
        reason.code if reason is not None else None,
        *_growth(reason.growth if reason is not None else ()),
    )


def _rows(method: str, ep: ExportedProgram) -> Iterator[GemmRow]:
    graph_module = ep.graph_module
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is executorch_call_delegate:
            lowered = getattr(graph_module, str(node.args[0].target))
            inner = getattr(lowered, "original_module", None)
            if inner is None:
                continue
            fed = _fed_by_computation(inner, node)
            for inner_node in inner.graph.nodes:
                if _gemm_name(inner_node):
                    yield _delegated_row(method, inner_node, lowered.backend_id, fed)
        elif _gemm_name(node):
            yield _outside_row(method, node)


def explain(program: Program) -> ExplainReport:
    """List every GEMM of a lowered program: delegated or not, folded or not, and why;
    and each other op left on portable for an argument XNNPACK computes differently.

    Args:
        program: the result of ``to_edge_transform_and_lower`` (or its
            ``to_executorch()``), or one lowered `ExportedProgram` (read as "forward").

    Returns:
        An `ExplainReport`; print it for a table, or read ``report.outside`` for the
        GEMMs left on the portable kernels, each with its reason.
    """
    if not isinstance(program, (EdgeProgramManager, ExecutorchProgramManager, ExportedProgram)):
        raise TypeError(
            "xnnfold.explain expects the EdgeProgramManager returned by "
            "to_edge_transform_and_lower (or its to_executorch() result, or an "
            f"ExportedProgram), got {type(program).__name__}"
        )
    programs = list(methods(program))
    copies = table_copies(program)
    return ExplainReport(
        tuple(row for method, ep in programs for row in _rows(method, ep)),
        copies.shared,
        copies.stored_twice,
        tuple(row for method, ep in programs for row in exact_gelu_rows(method, ep)),
        tuple(row for method, ep in programs for row in op_rows(method, ep)),
    )
