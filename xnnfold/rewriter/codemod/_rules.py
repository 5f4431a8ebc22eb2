"""The codemod's per-file rules: find computed-weight sites in source code and migrate them.

A model's source says which of its weights are computed: legacy hook-based
``torch.nn.utils.weight_norm`` / ``spectral_norm``, new-style parametrizations, weights
computed in ``forward``. xnnfold folds parametrizations; the legacy hooks it only marks, and
torch deprecates them. `transform_source` reads one file, reports every site with a stable
code, and rewrites what is safe to rewrite: legacy weight_norm (and its removals) to
``torch.nn.utils.parametrizations.weight_norm`` in every import and alias form, and export
sites that lower to XNNPACK to ``prepare_for_xnnpack`` / ``XnnpackFoldingPartitioner``.

Names are resolved through imports and aliases with libcst's `QualifiedNameProvider`, never
by spelling: a local function or class called ``weight_norm``, ``WN`` or ``norm`` is not a
site. Imports are added with `AddImportsVisitor` and legacy imports that became unused are
removed with `RemoveImportsVisitor`. A file is migrated completely or not at all: when it
reads legacy state_dict keys or attributes (which a migration renames), it is left alone
unless ``options.force``; a family (weight_norm, spectral_norm) is not migrated when one of
its removals cannot be mapped or is passed as a value, or its legacy import is conditional.
docs/codemod.md describes every rule.

Codes (``line:col`` are 1-based; ``Finding.rewritten`` says whether the new code changes
the site):

======  =============================================================================
XNF101  legacy ``torch.nn.utils.weight_norm``: migrated to parametrizations.weight_norm
XNF102  legacy ``remove_weight_norm``: migrated to parametrize.remove_parametrizations
XNF103  legacy ``torch.nn.utils.spectral_norm``: reported; migrated only with
        ``migrate_spectral_norm`` (torch has no state_dict compatibility hook for it)
XNF104  legacy ``remove_spectral_norm``: as XNF103
XNF201  ``parametrizations.weight_norm``: folded by xnnfold
XNF202  ``parametrizations.spectral_norm``: folded by xnnfold (export in eval mode)
XNF203  ``parametrizations.orthogonal``: folded by xnnfold (matrix_exp / cayley maps)
XNF204  ``parametrize.register_parametrization``: folded when the parametrization is pure
XNF210  weight computed in ``forward`` from module attributes: a folding candidate
XNF211  weight standardization in ``forward`` (batch_norm / mean / std / var of a weight)
XNF212  weight in ``forward`` that depends on the input (per-sample): declined
XNF301  ``torch.export.export``: model wrapped in ``prepare_for_xnnpack``
XNF302  ``to_edge_transform_and_lower``: the lowering call
XNF303  ``XnnpackPartitioner(...)``: replaced by ``XnnpackFoldingPartitioner(...)``
XNF401  string naming a legacy state_dict key (``weight_g``, ``weight_v``, ``weight_orig``,
        ``weight_u``): migration renames the key; blocks migrating this file
XNF402  attribute access to a legacy attribute (``.weight_g`` ...): as XNF401
XNF403  checkpoint loader copying key by key from a model's own ``state_dict()`` keys: it
        would skip legacy weights silently after a migration; as XNF401
======  =============================================================================
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, cast, Final, Iterable, Iterator, Mapping, Optional, Sequence, Union

import libcst as cst
from libcst.codemod import Codemod, CodemodContext, ContextAwareTransformer
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    PositionProvider,
    QualifiedNameProvider,
    ScopeProvider,
)

from xnnfold._upstream import LazyValue
from xnnfold.rewriter.codemod._api import CodemodOptions, FileOutcome, Finding, UnparseableSource

__all__ = ["TRIGGER_IDENTIFIERS", "TRIGGER_WORDS", "apply_rules", "transform_source"]

# ---------------------------------------------------------------------------------------
# Names, as QualifiedNameProvider spells them.

_UTILS: Final = "torch.nn.utils"
_PARAMETRIZATIONS: Final = "torch.nn.utils.parametrizations"
_PARAMETRIZE: Final = "torch.nn.utils.parametrize"

WEIGHT_NORM: Final = "weight_norm"
SPECTRAL_NORM: Final = "spectral_norm"


@dataclasses.dataclass(frozen=True)
class _Legacy:
    """One legacy function and what it migrates to."""

    code: str
    family: str  # WEIGHT_NORM or SPECTRAL_NORM
    removal: bool
    new_module: str
    new_obj: str

    @property
    def new_name(self) -> str:
        return f"{self.new_module}.{self.new_obj}"


_LEGACY: Final[dict[str, _Legacy]] = {}
# cast: the function `_code` below rebinds this loop variable; mypy must not type it as str.
for _family, _code, _rcode in cast(
    Any, ((WEIGHT_NORM, "XNF101", "XNF102"), (SPECTRAL_NORM, "XNF103", "XNF104"))
):
    _apply = _Legacy(_code, _family, False, _PARAMETRIZATIONS, _family)
    _remove = _Legacy(_rcode, _family, True, _PARAMETRIZE, "remove_parametrizations")
    # The function is re-exported by torch.nn.utils; its defining module works too.
    for _name in (f"{_UTILS}.{_family}", f"{_UTILS}.{_family}.{_family}"):
        _LEGACY[_name] = _apply
    for _name in (f"{_UTILS}.remove_{_family}", f"{_UTILS}.{_family}.remove_{_family}"):
        _LEGACY[_name] = _remove

_PARAMETRIZATION_CODES: Final = {
    f"{_PARAMETRIZATIONS}.weight_norm": (
        "XNF201",
        "parametrizations.weight_norm: folded by xnnfold (XnnpackFoldingPartitioner)",
    ),
    f"{_PARAMETRIZATIONS}.spectral_norm": (
        "XNF202",
        "parametrizations.spectral_norm: folded by xnnfold (XnnpackFoldingPartitioner); "
        "export in eval mode",
    ),
    f"{_PARAMETRIZATIONS}.orthogonal": (
        "XNF203",
        "parametrizations.orthogonal: folded by xnnfold with its matrix_exp and cayley maps "
        "(householder does not lower in executorch)",
    ),
    f"{_PARAMETRIZE}.register_parametrization": (
        "XNF204",
        "parametrize.register_parametrization: folded by xnnfold when the parametrization "
        "is pure ATen over parameters and constants",
    ),
}

_TORCH_EXPORT: Final = frozenset({"torch.export.export"})
_PREPARE: Final = frozenset(
    {
        "xnnfold.prepare_for_xnnpack",
        "xnnfold.rewriter.prepare_for_xnnpack",
        "xnnfold.rewriter._marking.prepare_for_xnnpack",
    }
)
_PREPARE_MODULE: Final = "xnnfold"
_PREPARE_OBJ: Final = "prepare_for_xnnpack"
_FOLDING_PARTITIONER: Final = "XnnpackFoldingPartitioner"
_STOCK_PARTITIONER: Final = "XnnpackPartitioner"
_LOWER: Final = "to_edge_transform_and_lower"
# XnnpackFoldingPartitioner's parameters: the stock partitioner's positional ones, in
# order, then its own keyword-only options. Every other keyword reaches the configs, as
# with the stock partitioner; a stock call passing one of the folding partitioner's own
# option names to its configs would change meaning, so such a call is left alone.
FOLDING_PARTITIONER_POSITIONAL: Final = ("configs", "config_precisions", "per_op_mode", "verbose")
FOLDING_PARTITIONER_OPTIONS: Final = (
    "fold",
    "max_fold_nodes",
    "keep_decomposition_filter",
    "growth_budget",
)

# GEMMs whose weight argument is examined in forward: name -> (weight index, bias index).
_GEMMS: Final[dict[str, tuple[int, ...]]] = {
    **{
        f"{prefix}.{op}{d}d": (1, 2)
        for prefix in ("torch.nn.functional", "torch")
        for op in ("conv", "conv_transpose")
        for d in (1, 2, 3)
    },
    "torch.nn.functional.linear": (1, 2),
    "torch.matmul": (0, 1),
    "torch.mm": (0, 1),
    "torch.addmm": (0, 1, 2),
}
_MATMULS: Final = frozenset({"torch.matmul", "torch.mm", "torch.addmm"})
_GEMM_KEYWORDS: Final = frozenset({"weight", "bias", "input", "other", "mat1", "mat2"})
_STANDARDIZE_FUNCS: Final = frozenset(
    {
        "torch.nn.functional.batch_norm",
        "torch.batch_norm",
        "torch.var_mean",
        "torch.std_mean",
        "torch.mean",
        "torch.std",
        "torch.var",
    }
)
_STANDARDIZE_METHODS: Final = frozenset({"mean", "std", "var", "var_mean", "std_mean"})

# Legacy state_dict keys and attributes, and what a migration turns them into.
_LEGACY_KEYS: Final = {
    "weight_g": "parametrizations.weight.original0 (weight_norm)",
    "weight_v": "parametrizations.weight.original1 (weight_norm) or "
    "parametrizations.weight.0._v (spectral_norm)",
    "weight_orig": "parametrizations.weight.original (spectral_norm)",
    "weight_u": "parametrizations.weight.0._u (spectral_norm)",
}
_LEGACY_KEY_RE: Final = re.compile(r"(?<![A-Za-z0-9_])(weight_(?:g|v|orig|u))(?![A-Za-z0-9_])")

# Every site spells one of these (the last component of a qualified name is always spelled
# in the file: ``import x as y`` spells ``x``): words as substrings, GEMM names as whole
# identifiers. A file with none of them skips the costly scope analysis; the driver reads
# these lists for its own pre-filter.
TRIGGER_WORDS: Final[tuple[str, ...]] = (
    WEIGHT_NORM,
    SPECTRAL_NORM,
    "parametriz",
    "orthogonal",
    "export",
    _LOWER,
    "Xnnpack",
    *_LEGACY_KEYS,
    "state_dict",
)
TRIGGER_IDENTIFIERS: Final[tuple[str, ...]] = tuple(
    sorted({name.rsplit(".", 1)[1] for name in _GEMMS})
)
_TRIGGERS: Final = re.compile(
    "|".join(re.escape(word) for word in TRIGGER_WORDS)
    + r"|(?<![A-Za-z0-9_])(?:"
    + "|".join(TRIGGER_IDENTIFIERS)
    + r")(?![A-Za-z0-9_])"
)

_PLACEHOLDER: Final = "__xnnfold_{}__"
_EXCERPT_CHARS: Final = 48


# ---------------------------------------------------------------------------------------
# Analysis: one read-only pass that records every site.


@dataclasses.dataclass
class _Site:
    code: str
    line: int
    col: int
    message: str
    node: Optional[cst.CSTNode] = None
    legacy: Optional[_Legacy] = None
    # For legacy references: is the node an Attribute on an expression for torch.nn.utils
    # (``nn.utils.weight_norm``), so that ``.parametrizations.`` can be inserted in place?
    on_utils: bool = False
    call: Optional[cst.Call] = None  # the call this reference is the callee of
    rewritten: bool = False
    # The message of a rewritten site in a run that writes nothing ("would migrate").
    pending: Optional[str] = None

    def planned(self, done: str, pending: str) -> None:
        """Say what the rewrite of this site does, in both tenses."""
        self.message, self.pending = done, pending

    def add_note(self, note: str) -> None:
        self.message += note
        if self.pending is not None:
            self.pending += note


@dataclasses.dataclass
class _Forward:
    self_name: Optional[str]
    inputs: frozenset[str]
    env: dict[str, list[cst.BaseExpression]]


@dataclasses.dataclass
class _Leaves:
    attrs: set[str] = dataclasses.field(default_factory=set)
    inputs: set[str] = dataclasses.field(default_factory=set)
    standardization: bool = False


def _code(node: cst.CSTNode) -> str:  # type: ignore[no-redef]  # rebinds the loop variable above
    return cst.Module(body=[]).code_for_node(node)


def _excerpt(node: cst.CSTNode) -> str:
    text = " ".join(_code(node).split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _assigned_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _assigned_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _assigned_names(target.value)


def _forward_env(function: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """Every local name of ``forward`` with every expression assigned to it."""
    env: dict[str, list[cst.BaseExpression]] = {}
    for node in _walk(function.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for name in _assigned_names(target.target):
                    env.setdefault(name, []).append(node.value)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)) and node.value is not None:
            for name in _assigned_names(node.target):
                env.setdefault(name, []).append(node.value)
        elif isinstance(node, cst.NamedExpr):
            for name in _assigned_names(node.target):
                env.setdefault(name, []).append(node.value)
    return env


def _param_names(params: cst.Parameters) -> list[str]:
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        names.append(params.star_arg.name.value)
    names.extend(p.name.value for p in params.kwonly_params)
    if params.star_kwarg is not None:
        names.append(params.star_kwarg.name.value)
    return names


def _own_state_dict(expr: cst.BaseExpression) -> Optional[str]:
    """``owner`` when ``expr`` is ``owner.state_dict()`` (or its ``.keys()``/``.items()``)."""
    if (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("keys", "items")
    ):
        expr = expr.func.value
    if (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "state_dict"
    ):
        return _excerpt(expr.func.value)
    return None


def _tolerant_copy(node: cst.CSTNode) -> bool:
    """A loop body that skips keys it cannot find: try/except, ``.get(``, or ``k in d``."""
    for child in _walk(node):
        if isinstance(child, cst.Try):
            return True
        if (
            isinstance(child, cst.Call)
            and isinstance(child.func, cst.Attribute)
            and child.func.attr.value == "get"
        ):
            return True
        if isinstance(child, cst.Comparison) and any(
            isinstance(c.operator, (cst.In, cst.NotIn)) for c in child.comparisons
        ):
            return True
    return False


class _Analysis(cst.CSTVisitor):
    """Records every site of one module; changes nothing.

    A plain visitor over ``wrapper.module`` reading the wrapper's metadata maps directly:
    the matcher-aware ContextAwareVisitor and ``get_metadata`` cost as much per node as the
    rules themselves, and this visitor uses no matchers.
    """

    def __init__(self, wrapper: MetadataWrapper) -> None:
        super().__init__()
        self._wrapper = wrapper
        self._qualified = wrapper.resolve(QualifiedNameProvider)
        # Positions are resolved on the first site (`_where`): most files that reach the
        # rules hold none, and positions cost half as much as the scope analysis.
        self._positions: Optional[Mapping[cst.CSTNode, CodeRange]] = None
        self.legacy: list[_Site] = []
        self.parametrizations: list[_Site] = []
        self.forward: list[_Site] = []
        self.exports: list[_Site] = []
        self.lowerings: list[_Site] = []
        self.partitioners: list[_Site] = []
        self.dependence: list[_Site] = []
        self.lowers_to_xnnpack = False
        # Source text of expressions already passed to prepare_for_xnnpack, and names
        # assigned from such calls: their export needs no second wrap.
        self.prepared: set[str] = set()
        self.prepare_calls: set[cst.Call] = set()
        self._callee_of: dict[cst.CSTNode, cst.Call] = {}
        self._scopes: list[cst.CSTNode] = []
        self._forwards: list[Optional[_Forward]] = []
        self._try_depth = 0
        # Local name -> position of a legacy import inside try/except: rewriting it would
        # leave the except branch describing an import that no longer happens.
        self.conditional_imports: dict[str, tuple[int, int]] = {}

    # -- helpers --------------------------------------------------------------------

    def _names(self, node: cst.CSTNode) -> set[str]:
        qualified = self._qualified.get(node)
        if isinstance(qualified, LazyValue):  # as get_metadata does
            qualified = qualified()
        return {q.name for q in qualified} if qualified else set()

    def _where(self, node: cst.CSTNode) -> tuple[int, int]:
        if self._positions is None:
            self._positions = self._wrapper.resolve(PositionProvider)
        start = self._positions[node].start
        return start.line, start.column + 1

    def _site(self, code: str, node: cst.CSTNode, message: str, **kwargs: object) -> _Site:
        line, col = self._where(node)
        return _Site(code, line, col, message, node=node, **kwargs)  # type: ignore[arg-type]

    # -- scopes ---------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._scopes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        is_method = bool(self._scopes) and isinstance(self._scopes[-1], cst.ClassDef)
        self._scopes.append(node)
        forward = None
        if is_method and node.name.value == "forward":
            names = _param_names(node.params)
            self_name = names[0] if node.params.posonly_params or node.params.params else None
            inputs = frozenset(n for n in names if n != self_name)
            forward = _Forward(self_name, inputs, _forward_env(node))
        elif self._forwards and self._forwards[-1] is not None:
            forward = self._forwards[-1]  # a helper nested in forward still computes there
        self._forwards.append(forward)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()
        self._forwards.pop()

    # -- what is not code -----------------------------------------------------------

    def visit_Try(self, node: cst.Try) -> None:
        self._try_depth += 1

    def leave_Try(self, original_node: cst.Try) -> None:
        self._try_depth -= 1

    def _conditional_import(self, node: cst.CSTNode, bindings: Iterable[tuple[str, str]]) -> None:
        """Record legacy imports inside try/except: (qualified name, local name) pairs."""
        if self._try_depth:
            for name, local in bindings:
                if name in _LEGACY:
                    self.conditional_imports.setdefault(local, self._where(node))

    def visit_Import(self, node: cst.Import) -> bool:
        self._conditional_import(
            node,
            (
                (alias.evaluated_name, alias.evaluated_alias or alias.evaluated_name)
                for alias in node.names
            ),
        )
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if (
            node.module is not None
            and not node.relative
            and not isinstance(node.names, cst.ImportStar)
        ):
            module = get_full_name_for_node(node.module)
            self._conditional_import(
                node,
                (
                    (
                        f"{module}.{alias.evaluated_name}",
                        alias.evaluated_alias or alias.evaluated_name,
                    )
                    for alias in node.names
                ),
            )
        return False

    def visit_Expr(self, node: cst.Expr) -> bool:
        # A bare string statement is a docstring or a comment, not a key lookup.
        return not isinstance(
            node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
        )

    # -- references -----------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        self._callee_of[node.func] = node
        names = self._names(node.func)
        if names & _TORCH_EXPORT:
            self.exports.append(self._site("XNF301", node, "torch.export.export", call=node))
        if names & _PREPARE:
            self.prepare_calls.add(node)
            if node.args:
                self.prepared.add(_code(node.args[0].value))
        if any(n.startswith("executorch.") and n.endswith(f".{_LOWER}") for n in names):
            self.lowerings.append(self._site("XNF302", node, _LOWER, call=node))
        if any(n.startswith("executorch.") and n.endswith(f".{_STOCK_PARTITIONER}") for n in names):
            self.partitioners.append(self._site("XNF303", node, _STOCK_PARTITIONER, call=node))
        forward = self._forwards[-1] if self._forwards else None
        if forward is not None and forward.self_name is not None:
            for name in names & _GEMMS.keys():
                self._forward_gemm(node, name, forward)

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._names(node.value.func) & _PREPARE:
            for target in node.targets:
                self.prepared.add(_code(target.target))

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        attr = node.attr.value
        if attr in _LEGACY_KEYS:
            self.dependence.append(
                self._site(
                    "XNF402",
                    node,
                    f"attribute .{attr} exists only under a legacy hook; migrated it is "
                    f"{_LEGACY_KEYS[attr]}",
                )
            )
        return not self._reference(node)

    def _reference(self, node: Union[cst.Name, cst.Attribute]) -> bool:
        """Record ``node`` if it names a site; True if it did (its children are not)."""
        names = self._names(node)
        if not names:
            return False
        if any(
            (n.startswith("executorch.") and n.endswith(f".{_STOCK_PARTITIONER}"))
            or (n.startswith("xnnfold.") and n.endswith(f".{_FOLDING_PARTITIONER}"))
            for n in names
        ):
            self.lowers_to_xnnpack = True
        for name in sorted(names):
            if name in _PARAMETRIZATION_CODES:
                # A new-style name wins: `try: from ...parametrizations import weight_norm
                # except ImportError: from torch.nn.utils import weight_norm` is migrated.
                code, message = _PARAMETRIZATION_CODES[name]
                self.parametrizations.append(self._site(code, node, message))
                return True
        legacy = next((_LEGACY[n] for n in sorted(names) if n in _LEGACY), None)
        if legacy is None:
            return False
        on_utils = isinstance(node, cst.Attribute) and self._names(node.value) == {_UTILS}
        self.legacy.append(
            self._site(
                legacy.code,
                node,
                "",
                legacy=legacy,
                on_utils=on_utils,
                call=self._callee_of.get(node),
            )
        )
        return True

    # -- legacy keys ----------------------------------------------------------------

    def _legacy_key_strings(self, node: cst.CSTNode, text: str) -> None:
        for key in dict.fromkeys(_LEGACY_KEY_RE.findall(text)):
            self.dependence.append(
                self._site(
                    "XNF401",
                    node,
                    f"string names legacy state_dict key '{key}'; migrated it is "
                    f"{_LEGACY_KEYS[key]}",
                )
            )

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._legacy_key_strings(node, node.value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self._legacy_key_strings(node, node.value)

    def _loader(self, node: cst.CSTNode, iterable: cst.BaseExpression, body: cst.CSTNode) -> None:
        owner = _own_state_dict(iterable)
        if owner is not None and _tolerant_copy(body):
            self.dependence.append(
                self._site(
                    "XNF403",
                    node,
                    f"checkpoint loader copies key by key from {owner}.state_dict(): after "
                    "a migration a legacy checkpoint's weight_g/weight_v (weight_orig/"
                    "weight_u) match no key and are skipped silently; use "
                    f"{owner}.load_state_dict(checkpoint), which converts weight_norm keys",
                )
            )

    def visit_For(self, node: cst.For) -> None:
        self._loader(node, node.iter, node.body)

    def _comprehension(
        self, node: cst.CSTNode, for_in: cst.CompFor, elements: Sequence[cst.CSTNode]
    ) -> None:
        comp: Optional[cst.CompFor] = for_in
        while comp is not None:
            for element in elements:
                self._loader(node, comp.iter, element)
            comp = comp.inner_for_in

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._comprehension(node, node.for_in, (node.key, node.value))

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._comprehension(node, node.for_in, (node.elt,))

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comprehension(node, node.for_in, (node.elt,))

    # -- computed weights in forward ----------------------------------------------------

    def _leaves(self, expr: cst.BaseExpression, forward: _Forward) -> _Leaves:
        leaves = _Leaves()
        seen: set[str] = set()
        stack: list[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Attribute):
                full = get_full_name_for_node(node)
                if full is not None and full.startswith(f"{forward.self_name}."):
                    leaves.attrs.add(full)
                    continue
            elif isinstance(node, cst.Name):
                if node.value in forward.inputs:
                    leaves.inputs.add(node.value)
                elif node.value in forward.env and node.value not in seen:
                    seen.add(node.value)
                    stack.extend(forward.env[node.value])
                continue
            elif isinstance(node, cst.Call):
                func = node.func
                if self._names(func) & _STANDARDIZE_FUNCS or (
                    isinstance(func, cst.Attribute) and func.attr.value in _STANDARDIZE_METHODS
                ):
                    leaves.standardization = True
                if isinstance(func, cst.Attribute):
                    receiver = func.value
                    if isinstance(receiver, cst.Name) and receiver.value == forward.self_name:
                        # ``self.kernel(style)``: a submodule (or method) of the module.
                        leaves.attrs.add(f"{receiver.value}.{func.attr.value}")
                    else:
                        # A tensor method: its receiver is data, its name is not.
                        stack.append(receiver)
                stack.extend(arg.value for arg in node.args)
                continue
            elif isinstance(node, cst.Lambda):
                continue
            stack.extend(node.children)
        return leaves

    def _is_plain(self, expr: cst.BaseExpression, forward: _Forward, seen: frozenset[str]) -> bool:
        """``self.weight``, or a local name only ever bound to such an attribute."""
        if isinstance(expr, cst.Attribute):
            full = get_full_name_for_node(expr)
            return full is not None and full.startswith(f"{forward.self_name}.")
        if isinstance(expr, cst.Name) and expr.value in forward.env and expr.value not in seen:
            return all(
                self._is_plain(value, forward, seen | {expr.value})
                for value in forward.env[expr.value]
            )
        return False

    def _forward_gemm(self, call: cst.Call, name: str, forward: _Forward) -> None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        arguments = [positional[i].value for i in _GEMMS[name] if i < len(positional)]
        arguments += [
            a.value
            for a in call.args
            if a.keyword is not None and a.keyword.value in _GEMM_KEYWORDS
        ]
        # A conv/linear names its weight; a matmul's operands may both be activations, so
        # only operands computed from attributes alone count there.
        named_weight = name not in _MATMULS
        per_sample: list[tuple[cst.BaseExpression, _Leaves]] = []
        computed: list[tuple[cst.BaseExpression, _Leaves]] = []
        for arg in arguments:
            if self._is_plain(arg, forward, frozenset()):
                continue
            leaves = self._leaves(arg, forward)
            if not leaves.attrs:
                continue
            if not leaves.inputs:
                computed.append((arg, leaves))
            elif named_weight:
                per_sample.append((arg, leaves))
        short = name.replace("torch.nn.functional.", "F.")
        if per_sample:
            inputs = ", ".join(sorted(set().union(*(leaves.inputs for _, leaves in per_sample))))
            excerpt = "; ".join(f"`{_excerpt(arg)}`" for arg, _ in per_sample)
            message = (
                f"per-sample weight in forward: declined: depends on the input ({inputs}): "
                f"{short} {excerpt} cannot be folded and stays outside the XNNPACK delegate"
            )
            self.forward.append(self._site("XNF212", call, message))
            return
        if not computed:
            return
        attrs = ", ".join(sorted(set().union(*(leaves.attrs for _, leaves in computed))))
        excerpt = "; ".join(f"`{_excerpt(arg)}`" for arg, _ in computed)
        if any(leaves.standardization for _, leaves in computed):
            code, what = "XNF211", "weight standardization in forward"
        else:
            code, what = "XNF210", "computed weight in forward"
        message = (
            f"{what}: {short} {excerpt} over {attrs}: XnnpackFoldingPartitioner folds it "
            "when every op is pure and every leaf a parameter or constant"
        )
        self.forward.append(self._site(code, call, message))


# ---------------------------------------------------------------------------------------
# Rewriting.


@dataclasses.dataclass(frozen=True)
class _Import:
    """A ``from module import obj [as local]`` the rewrite needs, via a placeholder name."""

    module: str
    obj: str
    local: str


def _removal_args(args: Sequence[cst.Arg]) -> Optional[list[cst.Arg]]:
    """``(module[, name])`` of ``remove_*_norm`` as ``(module, name)``; None if unsure."""
    if any(a.star for a in args):
        return None
    positional = [a for a in args if a.keyword is None]
    keywords = {a.keyword.value: a for a in args if a.keyword is not None}
    if set(keywords) - {"module", "name"} or len(positional) > 2:
        return None
    module = positional[0] if positional else keywords.get("module")
    if module is None or (positional and "module" in keywords):
        return None
    name = positional[1] if len(positional) > 1 else keywords.get("name")
    last = args[-1].comma
    comma = (
        module.comma
        if isinstance(module.comma, cst.Comma)
        else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    )
    first = module.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT, comma=comma)
    value = name.value if name is not None else cst.SimpleString('"weight"')
    second = cst.Arg(value=value, comma=last)
    return [first, second]


class _Rewrite(ContextAwareTransformer):
    """Pass 1: rewrite the chosen sites; new names go through placeholders."""

    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(
        self,
        context: CodemodContext,
        *,
        legacy: Sequence[_Site],
        exports: Sequence[_Site],
        partitioners: Sequence[_Site],
    ) -> None:
        super().__init__(context)
        self._refs = {s.node: s for s in legacy if s.call is None}
        # Every legacy site has its _Legacy (`_Analysis` records it with one).
        self._removal_calls = {
            s.call: s for s in legacy if s.call is not None and cast(_Legacy, s.legacy).removal
        }
        self._applications = {
            s.node: s for s in legacy if s.call is not None and not cast(_Legacy, s.legacy).removal
        }
        self._exports = {s.call: s for s in exports}
        self._partitioners = {s.call: s for s in partitioners}
        self.imports: dict[str, _Import] = {}

    def _placeholder(self, needed: _Import) -> cst.Name:
        for name, existing in self.imports.items():
            if existing == needed:
                return cst.Name(name)
        name = _PLACEHOLDER.format(len(self.imports))
        self.imports[name] = needed
        return cst.Name(name)

    def _callee(
        self, site: _Site, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        legacy = site.legacy
        assert legacy is not None
        if site.on_utils and isinstance(updated, cst.Attribute):
            submodule = legacy.new_module.rsplit(".", 1)[1]
            return cst.Attribute(
                value=cst.Attribute(value=updated.value, attr=cst.Name(submodule)),
                attr=cst.Name(legacy.new_obj),
            )
        if isinstance(original, cst.Name):
            RemoveImportsVisitor.remove_unused_import_by_node(self.context, original)
            local = legacy.new_obj if legacy.removal else original.value
        else:
            local = legacy.new_obj
        return self._placeholder(_Import(legacy.new_module, legacy.new_obj, local))

    def _reference(
        self, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        site = self._refs.get(original) or self._applications.get(original)
        if site is None:
            return updated
        site.rewritten = True
        return self._callee(site, original, updated)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._reference(original_node, updated_node)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        return self._reference(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        site = self._removal_calls.get(original_node)
        if site is not None:
            args = _removal_args(updated_node.args)
            assert args is not None  # checked when planning
            site.rewritten = True
            callee = self._callee(site, original_node.func, updated_node.func)
            updated_node = updated_node.with_changes(func=callee, args=args)
        export = self._exports.get(original_node)
        if export is not None:
            export.rewritten = True
            first = updated_node.args[0]
            wrapped = cst.Call(
                func=self._placeholder(_Import(_PREPARE_MODULE, _PREPARE_OBJ, _PREPARE_OBJ)),
                args=[cst.Arg(value=first.value)],
            )
            updated_node = updated_node.with_changes(
                args=[first.with_changes(value=wrapped), *updated_node.args[1:]]
            )
        partitioner = self._partitioners.get(original_node)
        if partitioner is not None:
            partitioner.rewritten = True
            RemoveImportsVisitor.remove_unused_import_by_node(self.context, original_node.func)
            updated_node = updated_node.with_changes(
                func=self._placeholder(
                    _Import(_PREPARE_MODULE, _FOLDING_PARTITIONER, _FOLDING_PARTITIONER)
                )
            )
        return updated_node


def _bound_names(module: cst.Module) -> dict[str, set[tuple[str, str]]]:
    """Local name -> the (module, obj) it is imported as, or ("", "") when defined here."""
    bound: dict[str, set[tuple[str, str]]] = {}
    for node in _walk(module):
        if isinstance(node, cst.Import):
            for alias in node.names:
                local = alias.evaluated_alias or alias.evaluated_name.split(".")[0]
                bound.setdefault(local, set()).add((alias.evaluated_name, ""))
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            source = get_full_name_for_node(node.module) if node.module is not None else ""
            source = "." * len(node.relative) + (source or "")
            for alias in node.names:
                local = alias.evaluated_alias or alias.evaluated_name
                bound.setdefault(local, set()).add((source, alias.evaluated_name))
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            bound.setdefault(statement.name.value, set()).add(("", ""))
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        for name in _assigned_names(target.target):
                            bound.setdefault(name, set()).add(("", ""))
    return bound


class _Resolve(cst.CSTTransformer):
    """Pass 3: placeholders become the imported names (or dotted paths on a clash)."""

    def __init__(self, names: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self._names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._names.get(updated_node.value, updated_node)


def _dotted(path: str) -> cst.BaseExpression:
    return cst.parse_expression(path)


def _resolve_placeholders(
    module: cst.Module, imports: dict[str, _Import], context: CodemodContext
) -> tuple[cst.Module, list[_Import]]:
    """Replace placeholders; schedule bare imports in ``context``, return aliased ones.

    AddImportsVisitor cannot add one name both bare and aliased in the same run (it sorts
    ``None`` against a string), so aliased imports are added in a second run.
    """
    bound = _bound_names(module)
    names: dict[str, cst.BaseExpression] = {}
    aliased: list[_Import] = []
    for placeholder, needed in imports.items():
        clash = bound.get(needed.local, set()) - {(needed.module, needed.obj)}
        legacy = sorted(
            f"{module}.{obj}" if obj else module
            for module, obj in clash
            if (f"{module}.{obj}" if obj else module) in _LEGACY
        )
        if legacy:
            raise _Decline(
                f"the import of {legacy[0]} stays in use (re-exported in __all__?); "
                "migrate this file by hand"
            )
        if clash:
            # The name means something else here: spell the full path instead.
            root = needed.module.split(".")[0]
            if bound.get(root, set()) - {(root, "")} - {(needed.module, "")}:
                raise _Decline(f"both {needed.local} and {root} are bound to something else")
            AddImportsVisitor.add_needed_import(context, needed.module)
            names[placeholder] = _dotted(f"{needed.module}.{needed.obj}")
        elif needed.local == needed.obj:
            AddImportsVisitor.add_needed_import(context, needed.module, needed.obj)
            names[placeholder] = cst.Name(needed.local)
        else:
            aliased.append(needed)
            names[placeholder] = cst.Name(needed.local)
    return module.visit(_Resolve(names)), aliased


class _Decline(Exception):
    """The rewrite cannot be done cleanly; the file is reported but left unchanged."""


# ---------------------------------------------------------------------------------------
# Planning: what the findings say and which sites are rewritten.


def _dependence_note(dependence: Sequence[_Site]) -> str:
    first = min(dependence, key=lambda s: (s.line, s.col))
    return f"{first.code} at {first.line}:{first.col}"


def _legacy_messages(
    sites: Sequence[_Site],
    options: CodemodOptions,
    dependence: Sequence[_Site],
    conditional_imports: dict[str, tuple[int, int]],
) -> dict[str, bool]:
    """Decide which families migrate; set each legacy site's message. Family -> migrate."""
    blocked = bool(dependence) and not options.force
    migrate: dict[str, bool] = {}
    unmigratable: dict[str, str] = {}
    for site in sites:
        assert site.legacy is not None
        if isinstance(site.node, cst.Name) and site.node.value in conditional_imports:
            line, col = conditional_imports[site.node.value]
            unmigratable.setdefault(
                site.legacy.family,
                f"the legacy import at {line}:{col} is conditional (inside try/except)",
            )
    for site in sites:
        assert site.legacy is not None
        if not site.legacy.removal or site.legacy.family in unmigratable:
            continue
        where = f"the use at {site.line}:{site.col}"
        if site.call is None:
            # Passed as a value, typically to ``module.apply``: apply would also visit the
            # parametrization's own submodules, where remove_parametrizations raises.
            unmigratable[site.legacy.family] = (
                f"{where} passes the removal as a value (module.apply would also visit "
                "the parametrization's own submodules)"
            )
        elif _removal_args(site.call.args) is None:
            unmigratable[site.legacy.family] = f"{where} passes arguments the rewrite cannot map"
    for family, enabled in (
        (WEIGHT_NORM, options.migrate_weight_norm),
        (SPECTRAL_NORM, options.migrate_spectral_norm),
    ):
        migrate[family] = enabled and not blocked and family not in unmigratable
    for site in sites:
        legacy = site.legacy
        assert legacy is not None
        old = f"torch.nn.utils.{'remove_' if legacy.removal else ''}{legacy.family}"
        head = f"legacy {old}"
        if migrate[legacy.family]:
            site.planned(
                f"{head}: migrated to {legacy.new_name}",
                f"{head}: would migrate to {legacy.new_name}",
            )
            if legacy.removal:
                site.add_note(" (raises ValueError when absent, as before)")
            if dependence:
                site.add_note(
                    f" despite legacy-key dependence ({_dependence_note(dependence)}; --force)"
                )
        elif legacy.family in unmigratable and _enabled(legacy.family, options):
            site.message = (
                f"{head}: not migrated: {unmigratable[legacy.family]}; migrate this file by hand"
            )
        elif not _enabled(legacy.family, options):
            if legacy.family == SPECTRAL_NORM:
                site.message = (
                    f"{head}: not migrated: no state_dict compatibility hook in torch: "
                    "migrate with --migrate-spectral-norm (and convert checkpoints)"
                )
            else:
                site.message = f"{head}: not migrated: weight_norm migration is off"
        else:
            site.message = (
                f"{head}: not migrated: this file depends on legacy state_dict keys or "
                f"attributes ({_dependence_note(dependence)}); rerun with --force to migrate"
            )
    return migrate


def _enabled(family: str, options: CodemodOptions) -> bool:
    return options.migrate_weight_norm if family == WEIGHT_NORM else options.migrate_spectral_norm


def _export_messages(
    analysis: _Analysis, options: CodemodOptions
) -> tuple[list[_Site], list[_Site]]:
    """Set export-site messages; return the export calls and partitioners to rewrite."""
    wire = options.wire_export and analysis.lowers_to_xnnpack
    exports: list[_Site] = []
    for site in analysis.exports:
        call = site.call
        assert call is not None
        first = (
            call.args[0]
            if call.args and call.args[0].keyword is None and not call.args[0].star
            else None
        )
        if first is None:
            site.message = "torch.export.export: model argument not positional; wire it by hand"
        elif first.value in analysis.prepare_calls or _code(first.value) in analysis.prepared:
            site.message = "torch.export.export: model already prepared with prepare_for_xnnpack"
        elif not analysis.lowers_to_xnnpack:
            site.message = (
                "torch.export.export: this file does not lower to XNNPACK; not wired "
                "(wrap the model in xnnfold.prepare_for_xnnpack where it is lowered)"
            )
        elif not wire:
            site.message = "torch.export.export: not wired: export wiring is off"
        else:
            site.planned(
                "torch.export.export: model wrapped in prepare_for_xnnpack",
                "torch.export.export: would wrap the model in prepare_for_xnnpack",
            )
            exports.append(site)
    for site in analysis.lowerings:
        site.message = (
            f"{_LOWER}: lowers to XNNPACK; its XnnpackPartitioner calls are reported as XNF303"
        )
    partitioners: list[_Site] = []
    for site in analysis.partitioners:
        assert site.call is not None
        unknown = _unknown_partitioner_arguments(site.call)
        if not wire:
            site.message = "XnnpackPartitioner: not replaced: export wiring is off"
        elif unknown:
            site.message = (
                f"XnnpackPartitioner: not replaced: the call passes {unknown} to the stock "
                "partitioner's configs, which XnnpackFoldingPartitioner reads as its own "
                "option; replace it by hand"
            )
        else:
            site.planned(
                "XnnpackPartitioner: replaced by XnnpackFoldingPartitioner (same arguments)",
                "XnnpackPartitioner: would be replaced by XnnpackFoldingPartitioner "
                "(same arguments)",
            )
            partitioners.append(site)
    return exports, partitioners


def _unknown_partitioner_arguments(call: cst.Call) -> str:
    """The keywords of an XnnpackPartitioner call that the folding partitioner would read
    differently: the stock partitioner hands every keyword to its configs, the folding
    one reads its own options' names itself. (Whatever ``**options`` holds is not known
    here; a call with too many positional arguments fails with either partitioner.)"""
    return ", ".join(
        arg.keyword.value
        for arg in call.args
        if arg.keyword is not None and arg.keyword.value in FOLDING_PARTITIONER_OPTIONS
    )


def _dependence_messages(analysis: _Analysis, options: CodemodOptions) -> None:
    if not analysis.dependence:
        return
    pending = None
    if not analysis.legacy:
        suffix = "; a migration of the model elsewhere would break it"
    elif options.force:
        suffix = "; migrated anyway (--force): update it"
        pending = "; would be migrated anyway (--force): update it"
    else:
        suffix = "; this file is not migrated (--force to override)"
    for site in analysis.dependence:
        if pending is not None:
            site.planned(site.message + suffix, site.message + pending)
        else:
            site.add_note(suffix)


class _Rules(Codemod):
    """All rules over one module: analyse, plan, rewrite, fix imports."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, ScopeProvider)

    def __init__(
        self, context: CodemodContext, *, options: CodemodOptions, rewrite: bool = True
    ) -> None:
        super().__init__(context)
        self.options = options
        self.sites: list[_Site] = []
        # False: stop before adding imports (the findings and ``pending`` are final then;
        # only the new bytes are missing). Report and check modes need no more.
        self.rewrite = rewrite
        self.pending = False

    def transform_module(self, tree: cst.Module) -> cst.Module:
        return _without_copy(self, tree)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        wrapper = self.context.wrapper
        assert wrapper is not None and wrapper.module is tree  # set by transform_module
        analysis = _Analysis(wrapper)
        tree.visit(analysis)
        migrate = _legacy_messages(
            analysis.legacy, self.options, analysis.dependence, analysis.conditional_imports
        )
        exports, partitioners = _export_messages(analysis, self.options)
        _dependence_messages(analysis, self.options)
        self.sites = [
            *analysis.legacy,
            *analysis.parametrizations,
            *analysis.forward,
            *analysis.exports,
            *analysis.lowerings,
            *analysis.partitioners,
            *analysis.dependence,
        ]
        legacy = [s for s in analysis.legacy if s.legacy is not None and migrate[s.legacy.family]]
        if not (legacy or exports or partitioners):
            return tree
        # A private context, so the imports scheduled here are applied exactly once.
        inner = dataclasses.replace(self.context, scratch={})
        rewrite = _Rewrite(inner, legacy=legacy, exports=exports, partitioners=partitioners)
        try:
            updated = tree.visit(rewrite)
            if inner.scratch.get(RemoveImportsVisitor.CONTEXT_KEY):
                # Without a scheduled removal the visitor changes nothing, and its scope
                # analysis of the whole module is the costliest step of a rewrite.
                updated = _without_copy(RemoveImportsVisitor(inner), updated)
            updated, aliased = _resolve_placeholders(updated, rewrite.imports, inner)
            # From here nothing declines: a rewrite is pending, and the findings are final.
            self.pending = True
            if not self.rewrite:
                return tree
            if inner.scratch.get(AddImportsVisitor.CONTEXT_KEY):
                updated = _without_copy(AddImportsVisitor(inner), updated)
            if aliased:
                second = dataclasses.replace(inner, scratch={})
                for needed in aliased:
                    AddImportsVisitor.add_needed_import(
                        second, needed.module, needed.obj, needed.local
                    )
                updated = _without_copy(AddImportsVisitor(second), updated)
        except _Decline as error:
            for site in self.sites:
                if site.rewritten:
                    site.rewritten = False
                    head = site.message.split(": ", 1)[0]
                    site.message, site.pending = f"{head}: not rewritten: {error}", None
            return tree
        return updated


# ---------------------------------------------------------------------------------------
# Entry points.


def _without_copy(codemod: Codemod, tree: cst.Module) -> cst.Module:
    """``codemod.transform_module(tree)`` without deep-copying ``tree`` for its metadata.

    `Codemod.transform_module` wraps the tree in a copying `MetadataWrapper` (a copy of
    every node, ~10 ms a file). Trees are immutable, none of these codemods keeps nodes
    across trees, and parsed or transformed trees hold no node twice where metadata is
    read, so the copy buys nothing here.
    """
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    old = codemod.context
    codemod.context = dataclasses.replace(old, wrapper=wrapper)
    try:
        with codemod.resolve(wrapper):
            return codemod.transform_module_impl(wrapper.module)
    finally:
        codemod.context = dataclasses.replace(codemod.context, wrapper=old.wrapper)


def _may_have_sites(text: str) -> bool:
    return _TRIGGERS.search(text) is not None


def _run_rules(
    module: cst.Module,
    *,
    options: CodemodOptions,
    context: Optional[CodemodContext],
    rewrite: bool,
    text: Optional[str] = None,
) -> tuple[cst.Module, tuple[Finding, ...], bool]:
    """`apply_rules`, plus whether a rewrite is pending (``rewrite=False`` skips making it)."""
    # ``module.code`` regenerates the whole source: use the caller's text when it has it.
    if not _may_have_sites(module.code if text is None else text):
        return module, (), False
    rules = _Rules(
        context if context is not None else CodemodContext(), options=options, rewrite=rewrite
    )
    updated = rules.transform_module(module)
    findings = tuple(
        Finding(
            site.code,
            site.line,
            site.col,
            site.message,
            rewritten=site.rewritten,
            pending_message=site.pending,
        )
        for site in sorted(rules.sites, key=lambda s: (s.line, s.col, s.code))
    )
    return updated, findings, rules.pending


def apply_rules(
    module: cst.Module, *, options: CodemodOptions, context: Optional[CodemodContext] = None
) -> tuple[cst.Module, tuple[Finding, ...]]:
    """Run every rule on a parsed module: the (possibly) rewritten module and the findings."""
    updated, findings, _ = _run_rules(module, options=options, context=context, rewrite=True)
    return updated, findings


def transform_source(code: bytes, *, options: CodemodOptions, rewrite: bool = True) -> FileOutcome:
    """Report and rewrite one file's source.

    Args:
        code: the file's bytes; its encoding cookie, line endings and indentation are kept.
        options: what may be rewritten (reporting is always on).
        rewrite: False when only the findings and whether a rewrite is pending are needed
            (report and check modes): the findings, their ``rewritten`` flags and
            ``pending`` are those of ``rewrite=True``, but ``new_code`` stays None. Skips
            the import rewriting, about half the cost of a file with a rewrite.

    Returns:
        The findings, sorted by position, and the new bytes, or ``new_code=None`` when
        nothing changes (``pending`` says whether something would).

    Raises:
        UnparseableSource: libcst cannot parse ``code`` (syntax error, syntax newer than
            libcst knows, or bytes that do not decode in the declared encoding).
    """
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as error:
        raise UnparseableSource(
            f"syntax error: {error.message} (line {error.raw_line}, column {error.raw_column})"
        ) from error
    except (UnicodeDecodeError, LookupError, SyntaxError, ValueError) as error:
        raise UnparseableSource(f"cannot decode or parse: {error}") from error
    try:
        text: Optional[str] = code.decode(module.encoding)
    except (UnicodeDecodeError, LookupError):
        text = None
    updated, findings, pending = _run_rules(
        module, options=options, context=None, rewrite=rewrite, text=text
    )
    if not rewrite:
        return FileOutcome(findings=findings, new_code=None, pending=pending)
    new_code = code if updated is module else updated.bytes
    if new_code == code:
        return FileOutcome(findings=findings, new_code=None)
    return FileOutcome(findings=findings, new_code=new_code, pending=True)
