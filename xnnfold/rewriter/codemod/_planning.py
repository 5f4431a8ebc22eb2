"""Planning: what each finding says and which sites are rewritten (a family migrates
completely or not at all), then the codemod that runs analysis, plan and rewrite on one
module (`Rules`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import libcst as cst
from libcst.codemod import Codemod, CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper, QualifiedNameProvider, ScopeProvider

from xnnfold.rewriter.codemod._analysis import Analysis
from xnnfold.rewriter.codemod._api import CodemodOptions
from xnnfold.rewriter.codemod._finding_codes import STOCK_PARTITIONER_CALL
from xnnfold.rewriter.codemod._names import (
    FOLDING_PARTITIONER_OPTIONS,
    LOWER,
    SPECTRAL_NORM,
    WEIGHT_NORM,
)
from xnnfold.rewriter.codemod._rewrite import (
    Decline,
    removal_args,
    resolve_placeholders,
    Rewrite,
)
from xnnfold.rewriter.codemod._sites import Site
from xnnfold.rewriter.codemod._syntax import source_of


def _dependence_note(dependence: Sequence[Site]) -> str:
    first = min(dependence, key=lambda s: (s.line, s.col))
    return f"{first.code} at {first.line}:{first.col}"


def _legacy_messages(
    sites: Sequence[Site],
    options: CodemodOptions,
    dependence: Sequence[Site],
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
        elif removal_args(site.call.args) is None:
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


def _export_messages(analysis: Analysis, options: CodemodOptions) -> tuple[list[Site], list[Site]]:
    """Set export-site messages; return the export calls and partitioners to rewrite."""
    wire = options.wire_export and analysis.lowers_to_xnnpack
    exports: list[Site] = []
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
        elif first.value in analysis.prepare_calls or source_of(first.value) in analysis.prepared:
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
            f"{LOWER}: lowers to XNNPACK; its XnnpackPartitioner calls are reported as "
            f"{STOCK_PARTITIONER_CALL.code}"
        )
    partitioners: list[Site] = []
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


def _dependence_messages(analysis: Analysis, options: CodemodOptions) -> None:
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


class Rules(Codemod):
    """All rules over one module: analyse, plan, rewrite, fix imports."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, ScopeProvider)

    def __init__(
        self, context: CodemodContext, *, options: CodemodOptions, rewrite: bool = True
    ) -> None:
        super().__init__(context)
        self.options = options
        self.sites: list[Site] = []
        # False: stop before adding imports (the findings and ``pending`` are final then;
        # only the new bytes are missing). Report and check modes need no more.
        self.rewrite = rewrite
        self.pending = False

    def transform_module(self, tree: cst.Module) -> cst.Module:
        return _without_copy(self, tree)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        wrapper = self.context.wrapper
        assert wrapper is not None and wrapper.module is tree  # set by transform_module
        analysis = Analysis(wrapper)
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
        rewrite = Rewrite(inner, legacy=legacy, exports=exports, partitioners=partitioners)
        try:
            updated = tree.visit(rewrite)
            if inner.scratch.get(RemoveImportsVisitor.CONTEXT_KEY):
                # Without a scheduled removal the visitor changes nothing, and its scope
                # analysis of the whole module is the costliest step of a rewrite.
                updated = _without_copy(RemoveImportsVisitor(inner), updated)
            updated, aliased = resolve_placeholders(updated, rewrite.imports, inner)
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
        except Decline as error:
            for site in self.sites:
                if site.rewritten:
                    site.rewritten = False
                    head = site.message.split(": ", 1)[0]
                    site.message, site.pending = f"{head}: not rewritten: {error}", None
            return tree
        return updated
