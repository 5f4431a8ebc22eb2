"""The rewrite (`Rewrite`): each planned site becomes its new spelling, behind a
placeholder name that `resolve_placeholders` turns into an import (or the name a file
already binds). `Decline` leaves a file unchanged."""

from __future__ import annotations

import dataclasses
from typing import cast, Final, Optional, Sequence

import libcst as cst
from libcst.codemod import CodemodContext, ContextAwareTransformer
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ScopeProvider

from xnnfold.rewriter.codemod._names import (
    FOLDING_PARTITIONER,
    LEGACY,
    Legacy,
    PREPARE_MODULE,
    PREPARE_OBJ,
)
from xnnfold.rewriter.codemod._sites import Site
from xnnfold.rewriter.codemod._syntax import assigned_names, walk_nodes

_PLACEHOLDER: Final = "__xnnfold_{}__"


@dataclasses.dataclass(frozen=True)
class _Import:
    """A ``from module import obj [as local]`` the rewrite needs, via a placeholder name."""

    module: str
    obj: str
    local: str


def removal_args(args: Sequence[cst.Arg]) -> Optional[list[cst.Arg]]:
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


class Rewrite(ContextAwareTransformer):
    """Pass 1: rewrite the chosen sites; new names go through placeholders."""

    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(
        self,
        context: CodemodContext,
        *,
        legacy: Sequence[Site],
        exports: Sequence[Site],
        partitioners: Sequence[Site],
    ) -> None:
        super().__init__(context)
        self._refs = {s.node: s for s in legacy if s.call is None}
        # Every legacy site has its Legacy (`Analysis` records it with one).
        self._removal_calls = {
            s.call: s for s in legacy if s.call is not None and cast(Legacy, s.legacy).removal
        }
        self._applications = {
            s.node: s for s in legacy if s.call is not None and not cast(Legacy, s.legacy).removal
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
        self, site: Site, original: cst.BaseExpression, updated: cst.BaseExpression
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
            args = removal_args(updated_node.args)
            assert args is not None  # checked when planning
            site.rewritten = True
            callee = self._callee(site, original_node.func, updated_node.func)
            updated_node = updated_node.with_changes(func=callee, args=args)
        export = self._exports.get(original_node)
        if export is not None:
            export.rewritten = True
            first = updated_node.args[0]
            wrapped = cst.Call(
                func=self._placeholder(_Import(PREPARE_MODULE, PREPARE_OBJ, PREPARE_OBJ)),
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
                    _Import(PREPARE_MODULE, FOLDING_PARTITIONER, FOLDING_PARTITIONER)
                )
            )
        return updated_node


def _bound_names(module: cst.Module) -> dict[str, set[tuple[str, str]]]:
    """Local name -> the (module, obj) it is imported as, or ("", "") when defined here."""
    bound: dict[str, set[tuple[str, str]]] = {}
    for node in walk_nodes(module):
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
                        for name in assigned_names(target.target):
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


def resolve_placeholders(
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
            if (f"{module}.{obj}" if obj else module) in LEGACY
        )
        if legacy:
            raise Decline(
                f"the import of {legacy[0]} stays in use (re-exported in __all__?); "
                "migrate this file by hand"
            )
        if clash:
            # The name means something else here: spell the full path instead.
            root = needed.module.split(".")[0]
            if bound.get(root, set()) - {(root, "")} - {(needed.module, "")}:
                raise Decline(f"both {needed.local} and {root} are bound to something else")
            AddImportsVisitor.add_needed_import(context, needed.module)
            names[placeholder] = _dotted(f"{needed.module}.{needed.obj}")
        elif needed.local == needed.obj:
            AddImportsVisitor.add_needed_import(context, needed.module, needed.obj)
            names[placeholder] = cst.Name(needed.local)
        else:
            aliased.append(needed)
            names[placeholder] = cst.Name(needed.local)
    return module.visit(_Resolve(names)), aliased


class Decline(Exception):
    """The rewrite cannot be done cleanly; the file is reported but left unchanged."""
