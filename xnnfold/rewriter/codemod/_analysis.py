"""The analysis: one read-only pass over a module (`Analysis`) that records every site,
resolving names through imports and aliases with `QualifiedNameProvider`."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Union

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider, QualifiedNameProvider

from xnnfold._upstream import LazyValue
from xnnfold.rewriter.codemod import _finding_codes as codes
from xnnfold.rewriter.codemod._names import (
    FOLDING_PARTITIONER,
    GEMM_KEYWORDS,
    GEMMS,
    LEGACY,
    LEGACY_KEY_RE,
    LEGACY_KEYS,
    LOWER,
    MATMULS,
    PARAMETRIZATION_CODES,
    PREPARE,
    STANDARDIZE_FUNCS,
    STANDARDIZE_METHODS,
    STOCK_PARTITIONER,
    TORCH_EXPORT,
    UTILS,
)
from xnnfold.rewriter.codemod._sites import Forward, Leaves, Site
from xnnfold.rewriter.codemod._syntax import (
    excerpt_of,
    forward_env,
    is_plain,
    own_state_dict,
    param_names,
    source_of,
    tolerant_copy,
)


class Analysis(cst.CSTVisitor):
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
        self.legacy: list[Site] = []
        self.parametrizations: list[Site] = []
        self.forward: list[Site] = []
        self.exports: list[Site] = []
        self.lowerings: list[Site] = []
        self.partitioners: list[Site] = []
        self.dependence: list[Site] = []
        self.lowers_to_xnnpack = False
        # Source text of expressions already passed to prepare_for_xnnpack, and names
        # assigned from such calls: their export needs no second wrap.
        self.prepared: set[str] = set()
        self.prepare_calls: set[cst.Call] = set()
        self._callee_of: dict[cst.CSTNode, cst.Call] = {}
        self._scopes: list[cst.CSTNode] = []
        self._forwards: list[Optional[Forward]] = []
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

    def _site(self, code: str, node: cst.CSTNode, message: str, **kwargs: object) -> Site:
        line, col = self._where(node)
        return Site(code, line, col, message, node=node, **kwargs)  # type: ignore[arg-type]

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
            names = param_names(node.params)
            self_name = names[0] if node.params.posonly_params or node.params.params else None
            inputs = frozenset(n for n in names if n != self_name)
            forward = Forward(self_name, inputs, forward_env(node))
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
                if name in LEGACY:
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
        if names & TORCH_EXPORT:
            self.exports.append(
                self._site(codes.TORCH_EXPORT_CALL.code, node, "torch.export.export", call=node)
            )
        if names & PREPARE:
            self.prepare_calls.add(node)
            if node.args:
                self.prepared.add(source_of(node.args[0].value))
        if any(n.startswith("executorch.") and n.endswith(f".{LOWER}") for n in names):
            self.lowerings.append(self._site(codes.LOWERING_CALL.code, node, LOWER, call=node))
        if any(n.startswith("executorch.") and n.endswith(f".{STOCK_PARTITIONER}") for n in names):
            self.partitioners.append(
                self._site(codes.STOCK_PARTITIONER_CALL.code, node, STOCK_PARTITIONER, call=node)
            )
        forward = self._forwards[-1] if self._forwards else None
        if forward is not None and forward.self_name is not None:
            for name in names & GEMMS.keys():
                self._forward_gemm(node, name, forward)

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._names(node.value.func) & PREPARE:
            for target in node.targets:
                self.prepared.add(source_of(target.target))

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        attr = node.attr.value
        if attr in LEGACY_KEYS:
            self.dependence.append(
                self._site(
                    codes.LEGACY_ATTRIBUTE.code,
                    node,
                    f"attribute .{attr} exists only under a legacy hook; migrated it is "
                    f"{LEGACY_KEYS[attr]}",
                )
            )
        return not self._reference(node)

    def _reference(self, node: Union[cst.Name, cst.Attribute]) -> bool:
        """Record ``node`` if it names a site; True if it did (its children are not)."""
        names = self._names(node)
        if not names:
            return False
        if any(
            (n.startswith("executorch.") and n.endswith(f".{STOCK_PARTITIONER}"))
            or (n.startswith("xnnfold.") and n.endswith(f".{FOLDING_PARTITIONER}"))
            for n in names
        ):
            self.lowers_to_xnnpack = True
        for name in sorted(names):
            if name in PARAMETRIZATION_CODES:
                # A new-style name wins: `try: from ...parametrizations import weight_norm
                # except ImportError: from torch.nn.utils import weight_norm` is migrated.
                code, message = PARAMETRIZATION_CODES[name]
                self.parametrizations.append(self._site(code, node, message))
                return True
        legacy = next((LEGACY[n] for n in sorted(names) if n in LEGACY), None)
        if legacy is None:
            return False
        on_utils = isinstance(node, cst.Attribute) and self._names(node.value) == {UTILS}
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
        for key in dict.fromkeys(LEGACY_KEY_RE.findall(text)):
            self.dependence.append(
                self._site(
                    codes.LEGACY_KEY_STRING.code,
                    node,
                    f"string names legacy state_dict key '{key}'; migrated it is "
                    f"{LEGACY_KEYS[key]}",
                )
            )

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._legacy_key_strings(node, node.value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self._legacy_key_strings(node, node.value)

    def _loader(self, node: cst.CSTNode, iterable: cst.BaseExpression, body: cst.CSTNode) -> None:
        owner = own_state_dict(iterable)
        if owner is not None and tolerant_copy(body):
            self.dependence.append(
                self._site(
                    codes.KEY_BY_KEY_LOADER.code,
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

    def _leaves(self, expr: cst.BaseExpression, forward: Forward) -> Leaves:
        leaves = Leaves()
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
                if self._names(func) & STANDARDIZE_FUNCS or (
                    isinstance(func, cst.Attribute) and func.attr.value in STANDARDIZE_METHODS
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

    def _forward_gemm(self, call: cst.Call, name: str, forward: Forward) -> None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        arguments = [positional[i].value for i in GEMMS[name] if i < len(positional)]
        arguments += [
            a.value for a in call.args if a.keyword is not None and a.keyword.value in GEMM_KEYWORDS
        ]
        # A conv/linear names its weight; a matmul's operands may both be activations, so
        # only operands computed from attributes alone count there.
        named_weight = name not in MATMULS
        per_sample: list[tuple[cst.BaseExpression, Leaves]] = []
        computed: list[tuple[cst.BaseExpression, Leaves]] = []
        for arg in arguments:
            if is_plain(arg, forward, frozenset()):
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
            excerpt = "; ".join(f"`{excerpt_of(arg)}`" for arg, _ in per_sample)
            message = (
                f"per-sample weight in forward: declined: depends on the input ({inputs}): "
                f"{short} {excerpt} cannot be folded and stays outside the XNNPACK delegate"
            )
            self.forward.append(self._site(codes.FORWARD_PER_SAMPLE_WEIGHT.code, call, message))
            return
        if not computed:
            return
        attrs = ", ".join(sorted(set().union(*(leaves.attrs for _, leaves in computed))))
        excerpt = "; ".join(f"`{excerpt_of(arg)}`" for arg, _ in computed)
        if any(leaves.standardization for _, leaves in computed):
            code, what = codes.FORWARD_STANDARDIZATION.code, "weight standardization in forward"
        else:
            code, what = codes.FORWARD_COMPUTED_WEIGHT.code, "computed weight in forward"
        message = (
            f"{what}: {short} {excerpt} over {attrs}: XnnpackFoldingPartitioner folds it "
            "when every op is pure and every leaf a parameter or constant"
        )
        self.forward.append(self._site(code, call, message))
